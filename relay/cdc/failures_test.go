package cdc_test

// Refused, nacked, too large and lost: what the CDC relay does with events
// and slots that fail it, and the configs it refuses.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/cdc"
)

// An event the broker keeps refusing is dead after MaxAttempts, in the
// table where "warren outbox dead" lists it, and does not hold the events
// behind it; Redrive sends it again through the stream.
func TestRefusedEventIsDeadAndRedriveSendsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Events of type poison.* are unroutable: the queue is bound to a
	// topic exchange by "workitem.#" only.
	router := testenv.Name(t, "router")
	testenv.CleanupExchanges(t, router)
	if _, err := e.ch.QueueDeclare(e.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		e.ch.ExchangeDeclare(router, "topic", true, false, false, false, nil),
		e.ch.ExchangeBind(router, "#", e.exchange, false, nil),
		e.ch.QueueBind(e.queue, "workitem.#", router, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.MaxAttempts, cfg.RetryMin, cfg.RetryMax = 2, 10*time.Millisecond, 10*time.Millisecond
	r, _ := e.start(cfg)
	poison := testenv.OutboxEvent("poison")
	poison.Type = "poison.event"
	e.ob.Publish(testenv.OutboxEvent("before"), poison, testenv.OutboxEvent("after"))
	e.receive([]string{"before", "after"}, time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the poison event to be dead", func() bool { return e.ob.Count("state = 'dead'") == 1 })
	dead, err := e.ob.Table.Dead(context.Background(), e.ob.Pool, outbox.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Event.ID != "poison" || dead[0].Attempts != 2 || dead[0].LastError == "" {
		t.Fatalf("dead rows %+v, want the poison event after 2 attempts, with its error", dead)
	}
	// The relay counts a dead row once its mark has committed, so just
	// after the row reads dead: wait for the count, then check it exactly.
	testenv.WaitFor(t, 30*time.Second, "the relay to count the dead event", func() bool { return r.Dead() >= 1 })
	if r.Dead() != 1 {
		t.Errorf("relay counted %d dead, want 1", r.Dead())
	}

	// Now route it, and redrive it.
	if err := e.ch.QueueBind(e.queue, "poison.#", router, false, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := e.ob.Table.Redrive(context.Background(), e.ob.Pool, outbox.Filter{}); err != nil || n != 1 {
		t.Fatalf("redrive: %d rows, %v", n, err)
	}
	e.receive([]string{"poison"}, time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the redriven row to be trimmed", func() bool { return e.ob.Count("true") == 0 })
}

// A queue at its length limit that rejects publishes makes the broker nack
// every event. That is the broker's state, not the events' fault (a quorum
// queue electing a leader looks the same): no attempt is spent, nothing
// is made dead however long it lasts, and after 5s of nothing but nacks
// the session ends, so that the next one publishes on a new channel. Once
// the queue has room the events arrive. (They were dead after MaxAttempts
// nacks, 10ms here, 3s at the defaults.)
func TestNackedEventsWaitForTheBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args := amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}
	e.bindQueueWith(args)
	plug := testenv.Channel(t)
	if err := plug.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := plug.PublishWithDeferredConfirm("", e.queue, false, false, amqp.Publishing{MessageId: "plug"})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish the plug: %v", err)
	}
	cfg := e.config()
	cfg.MaxAttempts, cfg.RetryMin, cfg.RetryMax = 2, 10*time.Millisecond, 10*time.Millisecond
	cfg.NackTimeout = 10 * time.Minute
	r, _ := e.start(cfg)
	want := e.ob.PublishN("refused", 3)
	testenv.WaitFor(t, 30*time.Second, "a session to end for nothing but nacks", func() bool {
		return strings.Contains(r.Health().LastError, "every publish nacked")
	})
	if n := e.ob.Count("state = 'dead'"); n != 0 || r.Dead() != 0 {
		t.Fatalf("%d rows dead (relay counted %d) of events the broker only nacked", n, r.Dead())
	}
	e.receive(append([]string{"plug"}, want...), time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
	if r.Dead() != 0 {
		t.Errorf("relay counted %d dead", r.Dead())
	}
}

// A nack can be the event's own doing: a queue under reject-publish nacks
// an event larger than its x-max-length-bytes every time, however empty it
// is. That event is dead once it has been nacked for NackTimeout, and the
// events behind it flow; the ones before and after it arrive.
func TestEventNackedForNackTimeoutIsDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args := amqp.Table{"x-max-length-bytes": int32(8 << 10), "x-overflow": "reject-publish"}
	e.bindQueueWith(args)
	cfg := e.config()
	cfg.RetryMin, cfg.RetryMax, cfg.NackTimeout = 10*time.Millisecond, 50*time.Millisecond, 500*time.Millisecond
	r, _ := e.start(cfg)
	big := testenv.OutboxEvent("too-big")
	big.Payload = warren.Payload{Data: []byte(fmt.Sprintf(`{"text":%q}`, randomText(16<<10)))}
	e.ob.Publish(testenv.OutboxEvent("before"), big, testenv.OutboxEvent("after"))
	e.receive([]string{"before", "after"}, time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the event too big for the queue to be dead", func() bool { return e.ob.Count("state = 'dead'") == 1 })
	dead, err := e.ob.Table.Dead(context.Background(), e.ob.Pool, outbox.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Event.ID != "too-big" || !strings.Contains(dead[0].LastError, "NackTimeout") {
		t.Fatalf("dead rows %+v, want the big event, dead of NackTimeout", dead)
	}
	// Counted once the mark has committed, just after the row reads dead.
	testenv.WaitFor(t, 30*time.Second, "the relay to count the dead event", func() bool { return r.Dead() >= 1 })
	if r.Dead() != 1 {
		t.Errorf("relay counted %d dead, want 1", r.Dead())
	}
}

// NackTimeout counts across the sessions that end on a nack streak: a
// queue that refuses everything ends a session every 5s, and an event
// nacked for longer than that is still dead once its 7s are up (counted
// again from each session, it never would be).
func TestNackTimeoutCountsAcrossSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args := amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}
	e.bindQueueWith(args)
	cfg := e.config()
	cfg.RetryMin, cfg.RetryMax, cfg.NackTimeout = 10*time.Millisecond, 100*time.Millisecond, 7*time.Second
	r, _ := e.start(cfg)
	e.ob.Publish(testenv.OutboxEvent("refused"))
	testenv.WaitFor(t, time.Minute, "the refused event to be dead", func() bool { return e.ob.Count("state = 'dead'") == 1 })
	if h := r.Health(); !strings.Contains(h.LastError, "every publish nacked") {
		t.Errorf("no session ended on the nack streak before the event was dead (last error %q): the test did not cross sessions", h.LastError)
	}
}

// A redriven row whose payload Postgres stores out of line (TOAST) arrives
// in the update without it; the relay reads it from the table.
func TestRedriveOfALargeRowReadsItFromTheTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	big := testenv.OutboxEvent("big")
	big.Payload = warren.Payload{Data: []byte(fmt.Sprintf(`{"text":%q}`, randomText(64<<10)))}
	// Written dead, as a relay would have left it, before any relay runs:
	// the backfill skips dead rows, so only the redrive can send it.
	e.ob.Publish(big)
	e.ob.Exec(`UPDATE {table} SET state = 'dead', finished_at = now(), last_error = 'test'`)
	r, _ := e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "the relay to stream", r.Streaming)
	if n, err := e.ob.Table.Redrive(context.Background(), e.ob.Pool, outbox.Filter{}); err != nil || n != 1 {
		t.Fatalf("redrive: %d rows, %v", n, err)
	}
	e.receive([]string{"big"}, time.Minute)
}

// An event too large to publish is dead at once, and the stream goes on.
func TestTooLargeEventIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	cfg := e.config()
	cfg.MaxMessageBytes = 4096
	e.start(cfg)
	big := testenv.OutboxEvent("too-large")
	big.Payload = warren.Payload{Data: []byte(fmt.Sprintf(`{"text":%q}`, randomText(8192)))}
	e.ob.Publish(big)
	e.ob.Publish(testenv.OutboxEvent("small"))
	e.receive([]string{"small"}, time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the large event to be dead", func() bool {
		return e.ob.Count("state = 'dead' AND event_id = 'too-large' AND last_error LIKE '%MaxMessageBytes%'") == 1
	})
}

// New refuses a config it cannot run, before connecting to anything.
func TestConfigIsChecked(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]cdc.Config{
		"no database":  {},
		"bad slot":     {DatabaseURL: "postgres://x/y", Slot: "Bad-Slot"},
		"bad table":    {DatabaseURL: "postgres://x/y", Table: "x.y"},
		"retry bounds": {DatabaseURL: "postgres://x/y", RetryMin: time.Second, RetryMax: time.Millisecond},
		// What the polling relay refuses too (relay/internal/engine.Shared):
		// a Format or MaxMessageBytes no event can pass would make every
		// event dead at once, an Exchange the broker refuses would end
		// every session.
		"unknown format":      {DatabaseURL: "postgres://x/y", Format: "bogus"},
		"no body fits":        {DatabaseURL: "postgres://x/y", MaxMessageBytes: -5},
		"reserved exchange":   {DatabaseURL: "postgres://x/y", Exchange: "amq.events"},
		"exchange with space": {DatabaseURL: "postgres://x/y", Exchange: "a b"},
		"unprintable name":    {DatabaseURL: "postgres://x/y", Name: "a\x00b"},
		"timeout under 1ms":   {DatabaseURL: "postgres://x/y", PublishTimeout: time.Nanosecond},
	} {
		_, err := cdc.New(cfg)
		if err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		} else if !errors.Is(err, cdc.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := cdc.New(cdc.Config{DatabaseURL: "postgres://localhost/test"}); err != nil {
		t.Errorf("the defaults with a DatabaseURL: %v", err)
	}
}

func randomText(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = letters[x%uint32(len(letters))]
	}
	return string(b)
}

// The relay publishes a transaction's rows only once a new snapshot sees
// them: the stream delivers it when its commit record is flushed, a
// moment before it is visible, and a trim then would miss its rows.
// visibleSQL counts the transactions still invisible, from their 32-bit
// xids as the stream gives them.
func TestVisibleSQLCountsTransactionsNotVisibleYet(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var xid int64
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint % 4294967296`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	invisible := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, cdc.VisibleSQL, []int64{xid, 3}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := invisible(); n != 1 {
		t.Errorf("while the transaction runs, %d invisible, want 1 (it, not the frozen xid 3)", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := invisible(); n != 0 {
		t.Errorf("after its commit, %d invisible, want 0", n)
	}
}

// A slot that disappears (a failover to a replica, a restore,
// max_slot_wal_keep_size) takes with it the stream of rows still pending;
// the relay that makes the next slot publishes them from the table,
// whatever the state table remembers of the old slot's backfill.
func TestALostSlotIsBackfilledAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	r, stop := e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "the relay to stream", r.Streaming)
	e.receive(e.ob.PublishN("first", 20), time.Minute)
	stop()
	pending := e.ob.PublishN("while-stopped", 30)
	testenv.WaitFor(t, 30*time.Second, "the slot to be released", func() bool {
		_, err := e.ob.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.slot)
		return err == nil
	})
	e.start(e.config())
	e.receive(pending, time.Minute)
}

// Slot names are the server's, not the database's: a slot of another
// database with the relay's name is refused with an error saying so, not
// waited on as if another relay held it.
func TestASlotOfAnotherDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// Another database of the same server, whatever DATABASE_URL names.
	cfg, err := pgx.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	other := "postgres"
	if cfg.Database == other {
		other = "template1"
	}
	cfg.Database = other
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.slot) })
	r, _ := e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "an error naming the slot's database", func() bool {
		return strings.Contains(r.Health().LastError, "belongs to database "+other)
	})
	if r.Streaming() {
		t.Error("the relay streams another database's slot")
	}
}

// The relay's own pool and its replication connection come from one
// DatabaseURL, which may carry pgxpool's and pgx's own keys; the server
// must not see them as startup parameters.
func TestDatabaseURLWithPoolSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	cfg := e.config()
	cfg.Pool = nil
	sep := "?"
	if strings.Contains(testenv.DatabaseURL(t), "?") {
		sep = "&"
	}
	cfg.DatabaseURL = testenv.DatabaseURL(t) + sep + "pool_max_conns=3&default_query_exec_mode=exec"
	r, _ := e.start(cfg)
	testenv.WaitFor(t, 30*time.Second, "the relay to stream", r.Streaming)
	e.receive(e.ob.PublishN("pool-url", 5), time.Minute)
}
