package relay_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// Rows whose publish waited for an in-flight slot that never freed up
// (MaxInFlight 1, the broker not confirming) never reached the broker:
// they are released with their attempt given back, and the log says so,
// while the one row that was sent and got no confirm spends its attempt.
func TestRowsThatGetNoInFlightSlotAreReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	brokerURL := testenv.AMQPURL(t)
	p := testenv.StartProxy(t, hostOf(t, brokerURL))
	logs := recordLogs(t)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL, cfg.KeepDelivered, cfg.Logger = p.URL(t, brokerURL), true, logs.logger
	// Each publish's PublishTimeout starts when its goroutine runs: long
	// enough that all five start before the first one's ends and frees
	// the slot, however slowly a busy machine schedules them.
	cfg.Workers, cfg.MaxInFlight, cfg.PublishTimeout = 1, 1, 3*time.Second

	var connected counter
	settled, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.start(cfg, func(r *relay.Relay) {
		relay.SetConnectedHook(r, connected.hook())
		relay.SetAfterSettleHook(r, func() {
			once.Do(func() { // hold the only worker after its first batch
				close(settled)
				select {
				case <-resume:
				case <-t.Context().Done():
				}
			})
		})
	})
	connected.waitAbove(t, 0, "the relay to connect")
	p.Stall(true)
	ids := e.publishN("ev", 5) // one transaction: one claim takes all five
	select {
	case <-settled:
	case <-time.After(60 * time.Second):
		t.Fatal("the relay settled no batch within 60s")
	}

	if n := e.count("attempts = 1 AND last_error LIKE 'no confirm from the broker within PublishTimeout%'"); n != 1 {
		t.Errorf("%d rows spent an attempt waiting for a confirm, want 1 (the one that was sent)", n)
	}
	if n := e.count("state = 'pending' AND attempts = 0 AND claimed_by IS NULL AND last_error IS NULL AND available_at <= now()"); n != 4 {
		t.Errorf("%d rows released with their attempt given back, want the 4 that never got a slot", n)
	}
	if !logs.contains("rows not sent to the broker") || !logs.contains("no free in-flight slot within PublishTimeout") {
		t.Errorf("no warning that rows were not sent for want of a slot; log:\n%s", logs.text())
	}
	close(resume)
	p.Stall(false)
	e.requireDelivered(got, ids)
}

// The settle's DELETE commits but its reply is lost (a proxy in front of
// Postgres closes the connection right after the commit), so the relay
// retries it and finds the rows gone. It must not report them as claimed
// again by another relay: they were settled by its own first attempt.
func TestSettleRetriedAfterALostCommitReplyIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	dbURL := testenv.DatabaseURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pg := testenv.StartLostReply(t, u.Host, sendsDelete, deleteCommitted)
	logs := recordLogs(t)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.DatabaseURL, cfg.Logger = pg.URL(t, dbURL), logs.logger

	ids := e.publishN("ev", 5)
	var settled counter // batches settled, retries included
	e.start(cfg, func(r *relay.Relay) { relay.SetAfterSettleHook(r, settled.hook()) })
	got.waitDistinct(t, len(ids), 60*time.Second)
	settled.waitAbove(t, 0, "the batch to be settled")
	if n := e.count("true"); n != 0 {
		t.Errorf("%d rows left after the settle", n)
	}
	if !pg.Lost() {
		t.Fatal("the proxy lost no reply to a settle; the test proved nothing")
	}
	if !logs.contains("settle failed, will retry") {
		t.Errorf("the settle was not retried after its lost reply; log:\n%s", logs.text())
	}
	if logs.contains("claimed again") {
		t.Errorf("a retried settle reported its own rows as claimed again; log:\n%s", logs.text())
	}
	got.requireOnce(t, ids, &e.claims)
}

// sendsDelete matches the settle that deletes delivered rows (its Parse
// carries the statement's text).
func sendsDelete(sent []byte) bool { return bytes.Contains(sent, []byte("DELETE FROM")) }

// deleteCommitted reads Postgres backend messages (a type byte, then a
// length that counts itself). It forwards replies up to each ReadyForQuery
// ('Z': the server is idle, so any implicit transaction before it is
// committed) and loses the first reply that completed a DELETE.
func deleteCommitted(withheld []byte) (pass int, lose bool) {
	deleted := false
	for at := 0; len(withheld)-at >= 5; {
		typ, size := withheld[at], int(binary.BigEndian.Uint32(withheld[at+1:]))
		end := at + 1 + size
		if end > len(withheld) {
			break
		}
		body := withheld[at+5 : end]
		switch {
		case typ == 'C' && bytes.HasPrefix(body, []byte("DELETE ")):
			deleted = true
		case typ == 'Z' && deleted:
			return 0, true
		case typ == 'Z':
			return end, false
		}
		at = end
	}
	return 0, false
}

// logRecord keeps a relay's log lines (warnings and up) and copies them to
// the test log.
type logRecord struct {
	t      *testing.T
	logger *slog.Logger
	mu     sync.Mutex
	buf    strings.Builder
}

func recordLogs(t *testing.T) *logRecord {
	l := &logRecord{t: t}
	l.logger = slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return l
}

func (l *logRecord) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (l *logRecord) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logRecord) contains(s string) bool { return strings.Contains(l.text(), s) }
