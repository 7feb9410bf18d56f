package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// StartCommand is what a developer runs to bring the services up.
const StartCommand = "scripts/services.sh"

// Default service addresses, overridden by AMQP_URL, DATABASE_URL and
// REDIS_URL like everywhere else in warren.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

var reachable sync.Map // address → error (nil when reachable)

// RequireServices is the unit tier's one gate: every test that needs a
// service (a shared one, a private broker or Postgres, Chromium, pika)
// passes through it, and under go test -short (make test-unit) it is
// skipped here, naming what it needed. Without -short it returns, and the
// test fails loudly if the service is missing.
func RequireServices(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped by -short (the unit tier); make test runs it", what)
	}
}

// requireTCP fails t unless something listens at the URL's host:port.
func requireTCP(t testing.TB, service, rawURL, defaultPort string) {
	t.Helper()
	RequireServices(t, service)
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("%s URL %q does not parse: %v", service, redact.URL(rawURL), err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), defaultPort)
	}
	v, ok := reachable.Load(host)
	if !ok {
		conn, err := net.DialTimeout("tcp", host, 3*time.Second)
		if err == nil {
			conn.Close()
		}
		v, _ = reachable.LoadOrStore(host, err)
	}
	if err, _ := v.(error); err != nil {
		t.Fatalf("%s is not reachable at %s: %v\nstart the services with: %s", service, redact.URL(rawURL), err, StartCommand)
	}
}

// AMQPURL returns the broker URL, failing t when the broker is down.
func AMQPURL(t testing.TB) string {
	t.Helper()
	u := env("AMQP_URL", amqpx.DefaultURL)
	requireTCP(t, "RabbitMQ", u, "5672")
	return u
}

// AMQPURLWith is the broker's URL with its password or its vhost replaced
// (empty: kept), for tests of what the broker refuses.
func AMQPURLWith(t testing.TB, password, vhost string) string {
	t.Helper()
	u, err := url.Parse(AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if password != "" {
		u.User = url.UserPassword(u.User.Username(), password)
	}
	if vhost != "" {
		u.Path = "/" + vhost
	}
	return u.String()
}

// RequireManagement fails t unless the broker's management HTTP API
// (rabbitmq_management, which the start command enables) answers on port
// 15672 of the broker's host.
func RequireManagement(t testing.TB) {
	t.Helper()
	u, err := url.Parse(amqpx.SplitURLs(AMQPURL(t))[0])
	if err != nil {
		t.Fatal(err)
	}
	requireTCP(t, "RabbitMQ's management API", "http://"+net.JoinHostPort(u.Hostname(), "15672"), "15672")
}

// DatabaseURL returns the Postgres URL, failing t when Postgres is down.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	u := env("DATABASE_URL", DefaultDatabaseURL)
	requireTCP(t, "PostgreSQL", u, "5432")
	return u
}

// RedisURL returns the Redis URL, failing t when Redis is down.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := env("REDIS_URL", DefaultRedisURL)
	requireTCP(t, "Redis", u, "6379")
	return u
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// Name returns a name unique to this test and this run, safe as a queue,
// exchange, table or key name: "wt_<kind>_<test>_<random>", at most 60
// characters, lower case.
func Name(t testing.TB, kind string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	test := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(test) > 30 {
		test = test[len(test)-30:]
	}
	return fmt.Sprintf("wt_%s_%s_%s", kind, test, hex.EncodeToString(b[:]))
}

// AMQPConn dials the broker and closes the connection when t ends.
func AMQPConn(t testing.TB) *amqp.Connection {
	t.Helper()
	url := AMQPURL(t)
	conn, err := amqpx.Dial(context.Background(), url, amqpx.DialOptions{Name: "testenv " + t.Name()})
	if err != nil {
		t.Fatalf("%v\nstart the services with: %s", err, StartCommand)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Channel opens a channel on a fresh connection owned by t.
func Channel(t testing.TB) *amqp.Channel {
	t.Helper()
	ch, err := AMQPConn(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// CleanupQueues deletes the queues when t ends, whatever state they are in.
func CleanupQueues(t testing.TB, names ...string) {
	t.Helper()
	url := AMQPURL(t)
	t.Cleanup(func() {
		withCleanupChannel(t, url, func(ch *amqp.Channel) error {
			for _, n := range names {
				if _, err := ch.QueueDelete(n, false, false, false); err != nil {
					return fmt.Errorf("delete queue %s: %w", n, err)
				}
			}
			return nil
		})
	})
}

// CleanupExchanges deletes the exchanges when t ends.
func CleanupExchanges(t testing.TB, names ...string) {
	t.Helper()
	CleanupExchangesAt(t, AMQPURL(t), names...)
}

// CleanupExchangesAt deletes the exchanges from the broker at url (a
// private node's) when t ends.
func CleanupExchangesAt(t testing.TB, url string, names ...string) {
	t.Cleanup(func() {
		withCleanupChannel(t, url, func(ch *amqp.Channel) error {
			for _, n := range names {
				if err := ch.ExchangeDelete(n, false, false); err != nil {
					return fmt.Errorf("delete exchange %s: %w", n, err)
				}
			}
			return nil
		})
	})
}

func withCleanupChannel(t testing.TB, url string, f func(*amqp.Channel) error) {
	conn, err := amqpx.Dial(context.Background(), url, amqpx.DialOptions{Name: "testenv cleanup"})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	if err := f(ch); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// QueueDepth returns the number of ready messages in queue, failing t when
// the queue does not exist.
func QueueDepth(t testing.TB, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// WaitFor polls cond every 10ms until it holds, failing t with what after
// timeout. It is for conditions another process makes true (a broker
// moving a message), where there is no event to wait on.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CloseConnections force-closes, through rabbitmqctl, every broker
// connection whose client-provided name contains match, the way an
// operator or a network fault would. It returns how many it closed.
func CloseConnections(t testing.TB, match string) int {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "pid", "client_properties").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
	}
	closed := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, match) {
			continue
		}
		pid, _, _ := strings.Cut(line, "\t")
		out, err := exec.Command("rabbitmqctl", "-q", "close_connection", pid, "testenv: simulated connection loss").CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqctl close_connection %s: %v\n%s", pid, err, out)
		}
		closed++
	}
	return closed
}

// RunInBackground runs run (a consumer's or a relay's Run) until t ends,
// then cancels its context, waits for it to return and fails t if it
// returned an error.
func RunInBackground(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}
