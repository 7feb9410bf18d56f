package relay_test

// The relay on Plane's own outbox table (outbox.SchemaPlane), made with
// Plane's DDL and written the way Plane's triggers write it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// planeEnv is one test's Plane table, exchange and bound queue.
type planeEnv struct {
	*env
	plane *testenv.PlaneTable
}

func newPlaneEnv(t *testing.T, withTimeZone, migrated bool) *planeEnv {
	t.Helper()
	p := testenv.NewPlaneTable(t, withTimeZone)
	e := &env{t: t, pool: p.Pool, table: p.Name, exchange: testenv.Name(t, "ex"), queue: testenv.Name(t, "q")}
	e.outbox = p.Outbox(outbox.Options{})
	testenv.CleanupExchanges(t, e.exchange)
	testenv.CleanupQueues(t, e.queue)
	e.ch = testenv.Channel(t)
	if err := e.ch.ExchangeDeclare(e.exchange, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.bindQueue()
	if migrated {
		if _, err := e.outbox.Migrate(context.Background(), e.pool); err != nil {
			t.Fatal(err)
		}
	}
	return &planeEnv{env: e, plane: p}
}

// config is env.config on the Plane table, in Plane's format.
func (e *planeEnv) config(name string) relay.Config {
	cfg := e.env.config(name)
	cfg.Schema, cfg.Format = outbox.SchemaPlane, warren.FormatPlane
	return cfg
}

func (e *planeEnv) count(where string, args ...any) int {
	e.t.Helper()
	return e.plane.Count(where, args...)
}

// eventIDs returns the event ids of every row of the table.
func (e *planeEnv) eventIDs() []string {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), fmt.Sprintf(`SELECT event_id::text FROM %q ORDER BY id`, e.table))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// requireAllProcessed waits until every row of the table is processed and
// every event arrived, and checks that nothing was deleted or stranded.
func (e *planeEnv) requireAllProcessed(got *collector, ids []string, within time.Duration) {
	e.t.Helper()
	got.waitDistinct(e.t, len(ids), within)
	got.requireOnly(e.t, ids)
	testenv.WaitFor(e.t, within, "processed_at set on every row", func() bool { return e.count("processed_at IS NULL") == 0 })
	if n := e.count("true"); n != len(ids) {
		e.t.Fatalf("the table holds %d rows for %d events: the relay deleted rows", n, len(ids))
	}
	if n := e.count("claimed_at IS NULL"); n != 0 {
		e.t.Fatalf("%d processed rows have no claimed_at", n)
	}
}

// Plane's table, in both of Django's timestamp types, with and without
// warren's optional columns: every row written the way Plane's triggers
// write it is published once, in Plane's format with the row id as
// outbox_id, and marked processed, never deleted.
func TestPlaneTableDrained(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		timeZone, migrated bool
	}{{"timestamp", false, false}, {"timestamptz", true, false}, {"timestamp migrated", false, true}, {"timestamptz migrated", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newPlaneEnv(t, c.timeZone, c.migrated)
			got := consume(t, e.queue)
			ids := e.plane.Insert(300)
			e.start(e.config(testenv.Name(t, "relay")))
			e.requireAllProcessed(got, ids, 60*time.Second)

			rowIDs := map[string]int64{}
			created := map[string]time.Time{}
			rows, err := e.pool.Query(context.Background(), fmt.Sprintf(`SELECT event_id::text, id, created_at::timestamptz FROM %q`, e.table))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var ev string
				var id int64
				var at time.Time
				if err := rows.Scan(&ev, &id, &at); err != nil {
					t.Fatal(err)
				}
				rowIDs[ev], created[ev] = id, at
			}
			rows.Close()
			for _, d := range got.deliveries() {
				var body struct {
					EventID   string          `json:"event_id"`
					OutboxID  int64           `json:"outbox_id"`
					Timestamp int64           `json:"timestamp"`
					Payload   json.RawMessage `json:"payload"`
					Workspace string          `json:"workspace_id"`
					Initiator string          `json:"initiator_type"`
				}
				if err := json.Unmarshal(d.Body, &body); err != nil {
					t.Fatalf("%v: %s", err, d.Body)
				}
				if body.OutboxID != rowIDs[body.EventID] || body.EventID != d.MessageId {
					t.Errorf("message %s has outbox_id %d, its row is %d", d.MessageId, body.OutboxID, rowIDs[body.EventID])
				}
				if age := time.Since(time.Unix(body.Timestamp, 0)); age < -time.Minute || age > 5*time.Minute {
					t.Errorf("message %s has timestamp %d, %v from the time it was written", d.MessageId, body.Timestamp, age)
				}
				if body.Timestamp != created[body.EventID].Unix() {
					t.Errorf("message %s has timestamp %d, its row was created at %v (%d)", d.MessageId, body.Timestamp, created[body.EventID], created[body.EventID].Unix())
				}
				if body.Workspace != "11111111-1111-1111-1111-111111111111" || body.Initiator != "USER" ||
					!bytes.Contains(body.Payload, []byte(`"previous_attributes"`)) {
					t.Errorf("message %s lost fields of its row: %s", d.MessageId, d.Body)
				}
			}
		})
	}
}

// Rows that Plane's crashed poller claimed and never processed (claimed_at
// set long ago, processed_at NULL) are taken over and published.
func TestPlaneStrandedClaimsAreTakenOver(t *testing.T) {
	t.Parallel()
	for _, migrated := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrated=%v", migrated), func(t *testing.T) {
			t.Parallel()
			e := newPlaneEnv(t, false, migrated)
			got := consume(t, e.queue)
			stranded := e.plane.Insert(40)
			e.plane.Exec(`UPDATE {table} SET claimed_at = now() - interval '3 days'`)
			fresh := e.plane.Insert(10)
			e.start(e.config(testenv.Name(t, "relay")))
			e.requireAllProcessed(got, append(stranded, fresh...), 60*time.Second)
		})
	}
}

// A relay whose lease lapsed, and whose rows another relay took over,
// cannot mark them processed nor put them back for a retry: its settle is
// fenced on the claimed_at its claim set.
func TestPlaneStaleRelayCannotSettleTakenOverRows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		migrated, staleSucceeds bool
	}{{false, false}, {false, true}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("migrated=%v stale publish succeeds=%v", c.migrated, c.staleSucceeds), func(t *testing.T) {
			t.Parallel()
			e := newPlaneEnv(t, false, c.migrated)
			got := consume(t, e.queue)
			ids := e.plane.Insert(20)
			const lease = 3 * time.Second // short, but the claim (bounded by Lease/2) must fit in it

			staleHeld := newHold(t)
			var staleSettled counter
			stale := e.config(testenv.Name(t, "stale"))
			stale.Lease, stale.PublishTimeout, stale.Workers, stale.MaxAttempts = lease, time.Second, 1, 1
			if !c.staleSucceeds {
				stale.Exchange = testenv.Name(t, "unbound") // no queue: every publish is returned
				testenv.CleanupExchanges(t, stale.Exchange)
			}
			e.start(stale, staleHeld.install, func(r *relay.Relay) { relay.SetAfterSettleHook(r, staleSettled.hook()) })
			staleRows := staleHeld.wait()

			freshHeld := newHold(t)
			fresh := e.config(testenv.Name(t, "fresh"))
			fresh.Lease, fresh.PublishTimeout, fresh.Workers = lease, time.Second, 1
			e.start(fresh, freshHeld.install)
			freshRows := freshHeld.wait() // taken over once the stale claims lapsed
			if len(freshRows) != len(ids) {
				t.Fatalf("the fresh relay took over %d rows, want %d", len(freshRows), len(ids))
			}
			for i := range freshRows {
				if freshRows[i].Claims == staleRows[0].Claims {
					t.Fatalf("the takeover's token %d equals the stale claim's", freshRows[i].Claims)
				}
			}

			type state struct {
				Claimed   time.Time
				Processed bool
				Attempts  int
				Dead      bool
			}
			snapshot := func() map[string]state {
				q := `SELECT event_id::text, claimed_at::timestamptz, processed_at IS NOT NULL, 0, false FROM %q`
				if c.migrated {
					q = `SELECT event_id::text, claimed_at::timestamptz, processed_at IS NOT NULL, warren_attempts, warren_dead_at IS NOT NULL FROM %q`
				}
				rows, err := e.pool.Query(context.Background(), fmt.Sprintf(q, e.table))
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				out := map[string]state{}
				for rows.Next() {
					var id string
					var s state
					if err := rows.Scan(&id, &s.Claimed, &s.Processed, &s.Attempts, &s.Dead); err != nil {
						t.Fatal(err)
					}
					out[id] = s
				}
				return out
			}
			before := snapshot()
			staleHeld.release()
			staleSettled.waitAbove(t, 0, "the stale relay to settle")
			if after := snapshot(); !mapsEqual(before, after) {
				t.Fatalf("the stale relay's settle changed rows it no longer held:\nbefore %v\nafter  %v", before, after)
			}
			freshHeld.release()
			e.requireAllProcessed(got, ids, 60*time.Second)
			if c.migrated {
				if n := e.count("warren_dead_at IS NOT NULL OR warren_last_error IS NOT NULL"); n != 0 {
					t.Errorf("%d rows carry the stale relay's failure", n)
				}
			}
		})
	}
}

// duplicates returns how many messages arrived beyond the first of each id.
func (c *collector) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total - len(c.counts)
}

// lineLog collects a relay's log lines, for tests that wait for one.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(string(p)))
	return len(p), nil
}

func (l *lineLog) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

func (l *lineLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// A row that can never be published (larger than MaxMessageBytes) is dead
// at once with warren's columns, listed by Dead with its error, and
// redriven; without them it cannot be dead, so it is retried after
// RetryMax and logged at Error each time, and the start-up says why.
// Either way the rows around it flow.
func TestPlanePoisonRow(t *testing.T) {
	t.Parallel()
	for _, migrated := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrated=%v", migrated), func(t *testing.T) {
			t.Parallel()
			e := newPlaneEnv(t, false, migrated)
			got := consume(t, e.queue)
			good := e.plane.Insert(10)
			poison := e.plane.InsertData(1, fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 4000)))[0]
			good = append(good, e.plane.Insert(10)...)
			var log lineLog
			cfg := e.config(testenv.Name(t, "relay"))
			cfg.MaxMessageBytes, cfg.Logger = 2000, log.logger()
			// Short enough that the unmigrated table's retries come round
			// within the test: the retry lapses after RetryMax, and lapsed
			// claims are looked for every Lease/2.
			cfg.Lease, cfg.PublishTimeout, cfg.RetryMax = 2*time.Second, time.Second, 300*time.Millisecond
			e.start(cfg)
			got.waitDistinct(t, len(good), 60*time.Second)
			got.requireOnly(t, good)
			testenv.WaitFor(t, 60*time.Second, "the good rows processed", func() bool { return e.count("processed_at IS NULL") == 1 })
			ctx := context.Background()
			if migrated {
				testenv.WaitFor(t, 60*time.Second, "the poison row dead", func() bool {
					return e.count("event_id = $1 AND warren_dead_at IS NOT NULL AND claimed_at IS NOT NULL AND processed_at IS NULL", poison) == 1
				})
				dead, err := e.outbox.Dead(ctx, e.pool, outbox.Filter{})
				if err != nil || len(dead) != 1 || dead[0].Event.ID != poison || dead[0].State != outbox.Dead ||
					!strings.Contains(dead[0].LastError, "MaxMessageBytes") || dead[0].Attempts != 1 {
					for _, r := range dead {
						t.Logf("dead row %d: event %s, state %s, attempts %d, error %q", r.ID, r.Event.ID, r.State, r.Attempts, r.LastError)
					}
					t.Fatalf("Dead listed %d rows, %v; want the poison row %s, dead at its first attempt, with its error", len(dead), err, poison)
				}
				if n, err := e.outbox.Redrive(ctx, e.pool, outbox.Filter{EventIDs: []string{poison}}); err != nil || n != 1 {
					t.Fatalf("Redrive = %d, %v", n, err)
				}
				// Redriven, it is claimed again (attempts from 0) and dies again.
				testenv.WaitFor(t, 60*time.Second, "the redriven row claimed and dead again", func() bool {
					return e.count("event_id = $1 AND warren_dead_at IS NOT NULL AND warren_attempts = 1", poison) == 1
				})
				if log.count("level=WARN") > 0 && log.count("lacks warren's optional columns") > 0 {
					t.Error("the relay warned of missing columns on a migrated table")
				}
				return
			}
			testenv.WaitFor(t, 60*time.Second, "the poison row retried and logged at Error twice", func() bool {
				return log.count("cannot be made dead") >= 2
			})
			if n := log.count("level=ERROR"); n < 2 {
				t.Errorf("%d Error lines, want one per attempt", n)
			}
			if log.count("lacks warren's optional columns") != 1 {
				t.Error("the relay did not warn at start that the table lacks warren's columns")
			}
			if _, err := e.outbox.Dead(ctx, e.pool, outbox.Filter{}); err == nil || !strings.Contains(err.Error(), "warren outbox migrate --schema plane") {
				t.Errorf("Dead on an unmigrated Plane table: %v", err)
			}
			if e.count("event_id = $1 AND processed_at IS NULL AND claimed_at IS NOT NULL", poison) != 1 {
				t.Error("the poison row is not held back as a claim")
			}
		})
	}
}
