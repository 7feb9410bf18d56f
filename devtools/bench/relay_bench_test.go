package main

import (
	"context"
	"testing"
	"time"

	"github.com/warrenmq/warren/relay"
)

// BenchmarkRelay moves b.N outbox rows to the broker with relay.Run and
// with the raw loop, so that one op is one message: allocs/op and B/op
// are per message (the set-up of the table, outside the timer, is not
// counted; a relay's dial and start are, spread over b.N), and cpu-µs/msg
// is this process's CPU time (user and system) per message, which on a
// shared machine holds up better than ns/op. Run it with a fixed count so
// both sides move the same backlog:
//
//	go test -run '^$' -bench Relay -benchmem -benchtime 20000x
//
// It needs the services of the bench (PostgreSQL and RabbitMQ).
func BenchmarkRelay(b *testing.B) {
	e := servicesEnv()
	sides := []struct {
		name  string
		drain func(ctx context.Context, e *env, ob *outboxBench, rows int) (time.Duration, error)
	}{
		{"raw", func(ctx context.Context, e *env, ob *outboxBench, rows int) (time.Duration, error) {
			return drainRaw(ctx, e, ob, 1, 0)
		}},
		{"warren", func(ctx context.Context, e *env, ob *outboxBench, rows int) (time.Duration, error) {
			return drainWithRelays(ctx, e, ob, 1, rows, nil)
		}},
		{"warren-batch100", func(ctx context.Context, e *env, ob *outboxBench, rows int) (time.Duration, error) {
			return drainWithRelays(ctx, e, ob, 1, rows, func(c *relay.Config) { c.BatchSize = 100 })
		}},
	}
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			ctx := context.Background()
			b.StopTimer()
			ob, err := filledOutbox(ctx, e, b.N)
			if err != nil {
				b.Fatal(err)
			}
			defer ob.close()
			clock := startPerMessage(b)
			if _, err := side.drain(ctx, e, ob, b.N); err != nil {
				b.Fatal(err)
			}
			clock.stop()
		})
	}
}
