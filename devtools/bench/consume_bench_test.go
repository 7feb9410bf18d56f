package main

import (
	"context"
	"testing"
	"time"
)

// BenchmarkConsume is BenchmarkRelay's twin for the consuming side: b.N
// events are published to a queue as a backlog outside the timer, then
// drained by the consume scenario's own code, so that one op is one
// consumed message and allocs/op, B/op and cpu-µs/msg are per message:
//
//   - raw: amqp091-go on 16 channels, acking multiple every 100 (rawDrain);
//   - warren: a BaseConsumer at its defaults with a no-op handler
//     (warrenDrain);
//   - raw-setnx and warren-redis-dedup: the same with one Redis
//     deduplication per message, a SET NX PX on each of 16 channels
//     against the Dedup middleware's lease (the consume + redis dedup
//     scenario's variants).
//
// The dial and start of a consumer and its shutdown are counted, spread
// over b.N. Run it with a fixed count so both sides drain the same
// backlog:
//
//	go test -run '^$' -bench Consume -benchmem -benchtime 20000x
//
// It needs the services of the bench (RabbitMQ, and Redis for the dedup
// sides). PROFILES.md has what it measured.
func BenchmarkConsume(b *testing.B) {
	sides := []struct {
		name  string
		drain func(ctx context.Context, e *env, filled func()) (time.Duration, error)
	}{
		{"raw", func(ctx context.Context, e *env, filled func()) (time.Duration, error) {
			return rawDrain(ctx, e, nil, workers, 100, nil, filled)
		}},
		{"warren", func(ctx context.Context, e *env, filled func()) (time.Duration, error) {
			return warrenDrain(ctx, e, nil, nil, filled)
		}},
		{"raw-setnx", func(ctx context.Context, e *env, filled func()) (time.Duration, error) {
			return rawDrain(ctx, e, nil, workers, 1, rawRedisSetNX, filled)
		}},
		{"warren-redis-dedup", func(ctx context.Context, e *env, filled func()) (time.Duration, error) {
			return warrenDrain(ctx, e, nil, warrenRedisDedup, filled)
		}},
	}
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			e := servicesEnv()
			e.messages = b.N
			b.StopTimer()
			var clock *perMessageClock
			if _, err := side.drain(context.Background(), e, func() { clock = startPerMessage(b) }); err != nil {
				b.Fatal(err)
			}
			clock.stop()
		})
	}
}
