package amqpx_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

func TestSplitURLs(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []string
	}{
		{"amqp://h1/", []string{"amqp://h1/"}},
		{"amqp://u:p@h1:5701/, amqps://u:p@h2:5702/v", []string{"amqp://u:p@h1:5701/", "amqps://u:p@h2:5702/v"}},
		// A comma in a password is part of it: only a scheme starts a URL.
		{"amqp://u:p,w@h1/,AMQP://u:p,w@h2/", []string{"amqp://u:p,w@h1/", "AMQP://u:p,w@h2/"}},
		// An empty element stays, so that CheckURL refuses it.
		{"amqp://h1/,", []string{"amqp://h1/", ""}},
	} {
		if got := amqpx.SplitURLs(tc.list); !slices.Equal(got, tc.want) {
			t.Errorf("SplitURLs(%q) = %q, want %q", tc.list, got, tc.want)
		}
	}
}

func TestCheckURLChecksEveryNode(t *testing.T) {
	if err := amqpx.CheckURL("amqp://guest:guest@h1:5701/,amqp://guest:guest@h2:5702/"); err != nil {
		t.Fatalf("a valid list: %v", err)
	}
	for _, list := range []string{
		"amqp://u:secret@h1/,",
		"amqp://u:secret@h1/,amqp://u:secret@h2:port/",
		"amqp://u:secret@h1/, http://h2/",
	} {
		err := amqpx.CheckURL(list)
		if err == nil {
			t.Errorf("CheckURL(%q) accepted it", list)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("CheckURL(%q) = %v: shows the password", list, err)
		}
	}
}

func TestRedactURLsKeepsEveryHost(t *testing.T) {
	got := amqpx.RedactURLs("amqp://u:secret@h1:5701/,amqp://u:secret@h2:5702/")
	if strings.Contains(got, "secret") || !strings.Contains(got, "h1:5701") || !strings.Contains(got, "h2:5702") {
		t.Fatalf("RedactURLs = %q: want both hosts and no password", got)
	}
}

// closedPort is an address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A list whose other nodes are down reaches the one that is up, from
// whichever node the random start picks, every time.
func TestDialReachesTheNodeThatIsUp(t *testing.T) {
	live := testenv.AMQPURL(t)
	dead1, dead2 := closedPort(t), closedPort(t)
	list := fmt.Sprintf("amqp://guest:guest@%s/,%s,amqp://guest:guest@%s/", dead1, live, dead2)
	liveHost := strings.TrimSuffix(strings.SplitN(strings.SplitN(live, "@", 2)[1], "/", 2)[0], "/")
	for range 8 {
		conn, err := amqpx.Dial(context.Background(), list, amqpx.DialOptions{Name: "dial test " + t.Name(), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("Dial(%s): %v", amqpx.RedactURLs(list), err)
		}
		got := conn.RemoteAddr().String()
		conn.Close()
		if got != liveHost {
			t.Fatalf("connected to %s, want the live node %s", got, liveHost)
		}
	}
}

// When no node answers, the error names every node tried, and DialRetry
// keeps trying until its context ends.
func TestDialNamesEveryNodeItTried(t *testing.T) {
	dead1, dead2 := closedPort(t), closedPort(t)
	list := fmt.Sprintf("amqp://guest:secret@%s/,amqp://guest:secret@%s/", dead1, dead2)
	_, err := amqpx.Dial(context.Background(), list, amqpx.DialOptions{Timeout: 5 * time.Second})
	if err == nil {
		t.Fatal("Dial to two closed ports succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, dead1) || !strings.Contains(msg, dead2) || strings.Contains(msg, "secret") {
		t.Fatalf("error %q: want both nodes named and no password", msg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := amqpx.NewBackOff(10 * time.Millisecond)
	attempts := 0
	log := slog.New(slog.NewTextHandler(countingWriter(func() {
		if attempts++; attempts == 3 {
			cancel()
		}
	}), nil))
	if _, err := amqpx.DialRetry(ctx, list, amqpx.DialOptions{Timeout: 5 * time.Second}, b, log); err == nil || ctx.Err() == nil {
		t.Fatalf("DialRetry = %v, want the context's end after three failed rounds", err)
	}
}

// countingWriter calls f for each log line written.
type countingWriter func()

func (f countingWriter) Write(p []byte) (int, error) { f(); return len(p), nil }

// A refused password or a missing vhost is returned by DialRetry at once,
// matching ErrRefused and saying what to fix, without the password; it
// does not retry until the context ends.
func TestDialRetryGivesUpOnARefusal(t *testing.T) {
	for _, tc := range []struct {
		name, url, want string
	}{
		{"password", testenv.AMQPURLWith(t, "wrong-secret", ""), "RabbitMQ refused the credentials for user guest at amqp://guest:xxxxx@"},
		{"vhost", testenv.AMQPURLWith(t, "", testenv.Name(t, "novhost")), "does not exist or user guest has no access to it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := amqpx.DialRetry(ctx, tc.url, amqpx.DialOptions{Name: "dial test " + t.Name()}, amqpx.NewBackOff(time.Second), slog.New(slog.DiscardHandler))
			if !errors.Is(err, amqpx.ErrRefused) || ctx.Err() != nil {
				t.Fatalf("DialRetry = %v (context: %v), want ErrRefused before the context ends", err, ctx.Err())
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "wrong-secret") {
				t.Fatalf("error %q: want %q and no password", err, tc.want)
			}
		})
	}
}
