package relay_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
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
		"unknown schema":         func(c *relay.Config) { c.Schema = "mongo" },
		"plane ordered":          func(c *relay.Config) { c.Schema, c.OrderByEntity = outbox.SchemaPlane, true },
		"cloudevents, no source": func(c *relay.Config) { c.CloudEvents = &cloudevents.Encoder{} },
		"cloudevents in plane's envelope": func(c *relay.Config) {
			c.CloudEvents, c.Format = &cloudevents.Encoder{Source: "/orders"}, warren.FormatPlane
		},
		"cloudevents with plane's properties": func(c *relay.Config) {
			c.CloudEvents, c.PlaneProperties = &cloudevents.Encoder{Source: "/orders"}, true
		},
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
	t.Parallel()
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
	t.Parallel()
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

// The statements on a Plane table: every placeholder filled, no row ever
// deleted, the hot claim on Plane's partial index (unclaimed and
// unprocessed, in id order), every settle fenced on the claim's
// claimed_at, and warren's optional columns used only when migrated.
func TestPlaneStatements(t *testing.T) {
	t.Parallel()
	ob, err := outbox.Open("outbox", outbox.Options{Schema: outbox.SchemaPlane, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	token := outboxsql.PlaneClaimToken("o.claimed_at") + " = s.claims"
	for _, migrated := range []bool{false, true} {
		stmts := relay.PlaneStatements(ob, 7, migrated)
		for name, q := range stmts {
			switch {
			case strings.ContainsAny(q, "{}"):
				t.Errorf("migrated=%v %s: a placeholder is left:\n%s", migrated, name, q)
			case strings.Contains(strings.ToUpper(q), "DELETE"):
				t.Errorf("migrated=%v %s deletes rows:\n%s", migrated, name, q)
			case strings.Contains(q, "warren_") != migrated:
				t.Errorf("migrated=%v %s: warren's columns used=%v:\n%s", migrated, name, !migrated, q)
			case name != "claim" && name != "claimTakeover" && !strings.Contains(q, token):
				t.Errorf("migrated=%v %s is not fenced on the claim's token:\n%s", migrated, name, q)
			}
		}
		hot := "WHERE c.claimed_at IS NULL AND c.processed_at IS NULL\n\tORDER BY c.id"
		if !strings.Contains(stmts["claim"], hot) || strings.Contains(stmts["claim"], "claimed_at < now()") {
			t.Errorf("migrated=%v: the hot claim is not Plane's:\n%s", migrated, stmts["claim"])
		}
		if !strings.Contains(stmts["claimTakeover"], "c.claimed_at < now() - interval '30000000 microseconds'") {
			t.Errorf("migrated=%v: the takeover does not look for claims older than the lease:\n%s", migrated, stmts["claimTakeover"])
		}
		if migrated && !strings.Contains(stmts["failure"], "o.warren_attempts >= 7") {
			t.Errorf("the failure settle does not make a row out of attempts dead:\n%s", stmts["failure"])
		}
	}
}
