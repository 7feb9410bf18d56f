package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// A producer under outbox.Options.NotifyWhenIdle that saw a due row sends
// no NOTIFY; if it commits after the relay's claim of that row looked, its
// row must be found by the poll that claim reset to PollMin, even when the
// relay had been idle long enough to back its poll off. So the relay first
// backs off (idlePolls empty claims, each doubling its poll); then the due
// row is committed, the producer writes its row while that one is due and
// commits from the hook that runs after the relay's claim: the race
// NotifyWhenIdle's safety argument covers, in its slowest form. The relay
// does not listen: the due row's NOTIFY would wake it, and a wake-up
// resets the poll as well, hiding whether the claim does. PollMax is an
// hour, so nothing but that reset finds the row soon.
// Serial: its verdict is a time bound (the late row claimed within the ~8 s backed-off poll).
func TestSkippedNotifyIsFoundByThePollAfterAClaim(t *testing.T) {
	e, got, quiet := newQuietEnv(t)
	ctx := context.Background()
	const idlePolls = 12
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.PollMin, cfg.PollMax = 2*time.Millisecond, time.Hour
	cfg.Workers, cfg.DisableListen = 1, true
	gate := &pollGate{t: t, at: idlePolls, reached: make(chan time.Duration, 1), released: make(chan struct{})}
	cfg.Observer = gate
	// The relay's poll when the due row's claim finds it: what it would
	// wait next if that claim did not reset it (about 8s).
	backedOff := cfg.PollMin << idlePolls

	// The hooks run on the relay's one worker, one after the other; late
	// is handed over by the gate's release, which comes before the claim.
	var (
		late       pgx.Tx
		dueSettled time.Time
		lateFound  = make(chan time.Duration, 1)
	)
	e.start(cfg, func(r *relay.Relay) {
		relay.SetAfterClaimHook(r, func(rows []outbox.Row) {
			for _, row := range rows {
				switch row.Event.ID {
				case "due": // the claim looked: the producer commits now
					if err := late.Commit(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
						t.Errorf("commit the late row: %v", err)
					}
				case "late":
					select {
					case lateFound <- time.Since(dueSettled):
					default: // claimed again after a failed publish
					}
				}
			}
		})
		relay.SetAfterSettleHook(r, func() {
			if dueSettled.IsZero() {
				dueSettled = time.Now()
			}
		})
	})

	var lastWait time.Duration
	select {
	case lastWait = <-gate.reached:
	case <-time.After(60 * time.Second):
		t.Fatalf("the relay did not wake %d times from its poll within 60s", idlePolls)
	}
	// Timers never fire early, so this holds unless the poll stopped
	// doubling, which would leave nothing for the claim to reset.
	if want := cfg.PollMin << (idlePolls - 1); lastWait < want {
		t.Fatalf("the relay's wait before its poll wake-up %d was %v, want at least %v: it did not back off", idlePolls, lastWait, want)
	}
	e.publish(event("due"))
	var err error
	if late, err = e.pool.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) // after the hook's commit, a no-op
	if _, err := quiet.Publish(ctx, late, event("late")); err != nil {
		t.Fatal(err)
	}
	close(gate.released)

	select {
	case d := <-lateFound:
		// PollMin and one claim after the due row's cycle ended; the
		// bound is the backed-off poll, which the relay waits only if the
		// claim did not reset it.
		if d >= backedOff {
			t.Fatalf("the row committed without a NOTIFY was claimed %v after the due row's cycle, want under %v (PollMin %v): a claim that found rows did not reset the poll", d, backedOff, cfg.PollMin)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the row committed without a NOTIFY was not claimed within 60s: a claim that found rows did not reset the poll")
	}
	testenv.WaitFor(t, 60*time.Second, "both rows to arrive", func() bool { return got.has("due") && got.has("late") })
	got.requireOnce(t, []string{"due", "late"}, &e.claims)
}

// pollGate is an Observer that holds the relay's worker at its at-th wake-up
// by the poll timer until released (or the test ends), and hands the
// test the wait that came before it. It assumes one worker.
type pollGate struct {
	t        *testing.T
	at       int
	polls    int
	last     time.Time
	reached  chan time.Duration
	released chan struct{}
}

func (g *pollGate) Woken(_ string, byNotify bool) {
	if byNotify {
		return
	}
	now := time.Now()
	g.polls++
	wait := now.Sub(g.last)
	g.last = now
	if g.polls != g.at {
		return
	}
	g.reached <- wait
	select {
	case <-g.released:
	case <-g.t.Context().Done(): // the test ended: let the relay stop
	}
}

func (*pollGate) Published(string, relay.Publication) {}
func (*pollGate) Dead(string, int)                    {}
func (*pollGate) OutboxStats(string, outbox.Stats)    {}

// The race-free half of the same argument: a producer that skipped its
// NOTIFY because a due row was waiting adds its row to what the relay's
// next claim takes, so a steady stream under NotifyWhenIdle is delivered
// whole with the idle poll an hour long.
func TestNotifyWhenIdleStreamIsDelivered(t *testing.T) {
	t.Parallel()
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
	quiet, err := outbox.Open(e.table, outbox.Options{Notify: outbox.NotifyWhenIdle})
	if err != nil {
		t.Fatal(err)
	}
	return e, consume(t, e.queue), quiet
}
