package amqpx_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/internal/testenv"
)

func TestSplitURLs(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// A message whose headers amqp091-go refuses (nested more than 32 deep,
// more than 8192 entries) closed the connection that read it. Read through
// Dial, over amqp and over amqps, it arrives with the entries the client
// can read and dlq.HeaderUnreadable saying what was wrong: for amqps, the
// frames are filtered on the plaintext side of TLS.
func TestDialReadsMessagesWithUnreadableHeaders(t *testing.T) {
	t.Parallel()
	plain := testenv.AMQPURL(t)
	proxy, caFile := testenv.StartTLSProxy(t, "127.0.0.1:5672")
	u, err := url.Parse(proxy.URL(t, plain))
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme, u.RawQuery = "amqps", url.Values{"cacertfile": {caFile}}.Encode()

	queue := testenv.Name(t, "q")
	testenv.CleanupQueues(t, queue)
	ch := testenv.Channel(t)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var msgs []amqp.Publishing
	want := map[string]testenv.Unreadable{}
	for name, h := range testenv.UnreadableHeaders() {
		msgs = append(msgs, amqp.Publishing{MessageId: name, Type: "workitem.created", Headers: h.Headers, Body: []byte(`{}`)})
		want[name] = h
	}
	testenv.PublishInOrder(t, testenv.AMQPConn(t), queue, msgs)

	for _, url := range []string{plain, u.String()} {
		conn, err := amqpx.Dial(context.Background(), url, amqpx.DialOptions{Name: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if tlsUsed := conn.ConnectionState().HandshakeComplete; tlsUsed != strings.HasPrefix(url, "amqps:") {
			t.Errorf("%s: TLS handshake complete: %v", redact.URL(url), tlsUsed)
		}
		rch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		for range msgs {
			d, ok, err := rch.Get(queue, false)
			if err != nil || !ok {
				t.Fatalf("%s: get: %v, %v", redact.URL(url), ok, err)
			}
			w := want[d.MessageId]
			why, _ := d.Headers[dlq.HeaderUnreadable].(string)
			if !strings.Contains(why, w.Reason) || d.Type != "workitem.created" || string(d.Body) != `{}` || len(d.Headers) != len(w.Kept)+1 {
				t.Errorf("%s: %s arrived as type %q, body %q, headers %v; want %q and the entries %v", redact.URL(url), d.MessageId, d.Type, d.Body, d.Headers, w.Reason, w.Kept)
			}
		}
		if err := rch.Nack(0, true, true); err != nil { // all back, for the next URL
			t.Fatal(err)
		}
	}
}
