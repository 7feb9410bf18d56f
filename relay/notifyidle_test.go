package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// A producer under outbox.Options.NotifyWhenIdle that saw a due row sends
// no NOTIFY; its row must still be published, by the poll that follows the
// claim of that due row, not by the idle poll (PollMax is an hour here).
// The producer commits only after the due row was delivered: the race
// NotifyWhenIdle's safety argument covers, in its slowest form. The relay
// does not listen, so that nothing but that poll can find the row (a
// listener's first wake-up would reset the poll too).
func TestSkippedNotifyIsFoundByThePollAfterAClaim(t *testing.T) {
	e, got, quiet := newQuietEnv(t)
	ctx := context.Background()
	e.publish(event("due")) // no relay yet: it stays due
	late, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx)
	if _, err := quiet.Publish(ctx, late, event("late")); err != nil {
		t.Fatal(err)
	}

	cfg := e.config(testenv.Name(t, "relay"))
	cfg.PollMax, cfg.Workers, cfg.DisableListen = time.Hour, 1, true
	e.start(cfg)
	testenv.WaitFor(t, 60*time.Second, "the due row (the relay claims once it starts)", func() bool { return got.has("due") })
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the row committed without a NOTIFY (the relay's poll after a claim that found rows should find it)",
		func() bool { return got.has("late") })
	got.requireOnce(t, []string{"due", "late"}, &e.claims)
}

// The race-free half of the same argument: a producer that skipped its
// NOTIFY because a due row was waiting adds its row to what the relay's
// next claim takes, so a steady stream under NotifyWhenIdle is delivered
// whole with the idle poll an hour long.
func TestNotifyWhenIdleStreamIsDelivered(t *testing.T) {
	e, got, quiet := newQuietEnv(t)
	ctx := context.Background()
	var listening counter
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.PollMax = time.Hour
	e.start(cfg, func(r *relay.Relay) { relay.SetListeningHook(r, listening.hook()) })
	listening.waitAbove(t, 0, "the relay to listen")
	var ids []string
	for i := range 300 {
		ev := event(fmt.Sprintf("ev-%d", i))
		ids = append(ids, ev.ID)
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			_, err := quiet.Publish(ctx, tx, ev)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	got.waitDistinct(t, len(ids), 60*time.Second)
	got.requireOnce(t, ids, &e.claims)
}

// newQuietEnv is a test's env with its queue bound and consumed, and its
// outbox table opened with NotifyWhenIdle for the producers.
func newQuietEnv(t *testing.T) (*env, *collector, *outbox.Table) {
	t.Helper()
	e := newEnv(t)
	e.bindQueue()
	quiet, err := outbox.Open(e.table, outbox.Options{NotifyWhenIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	return e, consume(t, e.queue), quiet
}
