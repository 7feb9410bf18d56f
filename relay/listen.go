package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// listenerPing is how long the listener waits for a notification before it
// checks that its connection is still alive; a connection that died
// without a reset would otherwise wait forever.
const listenerPing = 30 * time.Second

// listen keeps a dedicated connection LISTENing on the outbox's channel
// and wakes the workers on every notification, until ctx ends.
//
// Notifications only make the relay quick. Polling stays the source of
// truth: a notification sent while the listener reconnects is lost, and a
// retry or lease falling due sends none, so losing the listener costs
// latency (up to PollMax), never an event.
func (r *Relay) listen(ctx context.Context, pool *pgxpool.Pool) {
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = r.cfg.Name + " listener"
	b := amqpx.NewBackOff(r.cfg.ReconnectMaxDelay)
	for {
		err := r.listenOnce(ctx, cfg, b.Reset)
		if ctx.Err() != nil {
			return
		}
		wait := b.NextBackOff()
		r.log.Warn("notification listener lost, polling meanwhile", "error", redact.Error(err, r.cfg.DatabaseURL), "retry_in", wait.Round(time.Millisecond))
		if !sleep(ctx.Done(), wait) {
			return
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, cfg *pgx.ConnConfig, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect listener: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.outbox.Channel()}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	connected()
	// Whatever was committed while nobody listened sent its notification
	// into the void: look now.
	r.wake.Signal()
	if r.hooks.listening != nil {
		r.hooks.listening()
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, listenerPing)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			r.wake.Signal()
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("listener connection is not answering: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}
