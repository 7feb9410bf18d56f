package relay_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/relay"
)

func TestNewValidatesConfig(t *testing.T) {
	valid := relay.Config{DatabaseURL: "postgres://u@localhost/db"}
	if _, err := relay.New(valid); err != nil {
		t.Fatalf("a minimal config is refused: %v", err)
	}
	for name, mutate := range map[string]func(*relay.Config){
		"no database":            func(c *relay.Config) { c.DatabaseURL = "" },
		"bad table":              func(c *relay.Config) { c.Table = "Bad-Name" },
		"reserved exchange":      func(c *relay.Config) { c.Exchange = "amq.fanout" },
		"lease under timeout":    func(c *relay.Config) { c.Lease, c.PublishTimeout = time.Second, 2*time.Second },
		"negative batch":         func(c *relay.Config) { c.BatchSize = -1 },
		"huge batch":             func(c *relay.Config) { c.BatchSize = relay.MaxBatchSize + 1 },
		"retry max below min":    func(c *relay.Config) { c.RetryMin, c.RetryMax = time.Minute, time.Second },
		"poll max below min":     func(c *relay.Config) { c.PollMin, c.PollMax = time.Minute, time.Second },
		"sub-millisecond poll":   func(c *relay.Config) { c.PollMin = time.Microsecond },
		"unparsable URL":         func(c *relay.Config) { c.DatabaseURL = "postgres://u:s3cr3tpw@host:notaport/db" },
		"control char in name":   func(c *relay.Config) { c.Name = "a\nb" },
		"negative max attempts":  func(c *relay.Config) { c.MaxAttempts = -3 },
		"negative message bytes": func(c *relay.Config) { c.MaxMessageBytes = -1 },
	} {
		cfg := valid
		mutate(&cfg)
		_, err := relay.New(cfg)
		if !errors.Is(err, relay.ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3tpw") {
			t.Errorf("%s: error reveals the password: %v", name, err)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	lo, hi := time.Second, time.Minute
	for attempt, nominal := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 7: time.Minute, 1000: time.Minute,
	} {
		for range 200 {
			d := relay.RetryDelay(attempt, lo, hi)
			if d < nominal/2 || d > nominal {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, nominal/2, nominal)
			}
		}
	}
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[relay.RetryDelay(3, lo, hi)] = true
	}
	if len(seen) < 10 {
		t.Errorf("retry delays are not jittered: %d distinct values in 50", len(seen))
	}
}

// A broker or database URL whose password does not parse (an unescaped '%'
// or '#') is refused by New, and neither the error nor the pieces of the
// URL that net/url quotes reveal the password.
func TestUnparsableURLIsRefusedWithoutItsPassword(t *testing.T) {
	for _, tc := range []struct {
		cfg           relay.Config
		secret, piece string
	}{
		{relay.Config{DatabaseURL: "postgres://u@localhost/db", AMQPURL: "amqp://guest:50%off@127.0.0.1:5672/"}, "50%off", "%of"},
		{relay.Config{DatabaseURL: "postgres://u@localhost/db", AMQPURL: "amqp://guest:Hunter2#x@127.0.0.1:5672/"}, "Hunter2#x", "Hunter2"},
		{relay.Config{DatabaseURL: "postgres://u:50%off@localhost/db"}, "50%off", "%of"},
	} {
		_, err := relay.New(tc.cfg)
		if !errors.Is(err, relay.ErrInvalidConfig) {
			t.Fatalf("New with AMQPURL %q, DatabaseURL %q: %v, want ErrInvalidConfig", tc.cfg.AMQPURL, tc.cfg.DatabaseURL, err)
		}
		if msg := err.Error(); strings.Contains(msg, tc.secret) || strings.Contains(msg, tc.piece) || !strings.Contains(msg, ":xxxxx@") {
			t.Errorf("error reveals the password or not the URL: %s", msg)
		}
	}
}
