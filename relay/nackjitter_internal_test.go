package relay

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
)

// A quiet relay whose one event is nacked on a stuck channel renews its
// session whatever the jitter of its default retry delays (0.5-1s,
// 1-2s, 2-4s, 4-8s, ...): before, when the first nacks spanned less than
// NackedSessionLimit and the next gap was longer, the streak broke and
// never formed again (~27% of runs). This runs the relay's own
// retryDelay against amqpx.NackStreak, checked every second as the
// relay's ticker does.
func TestQuietStuckChannelRenewsWithDefaultRetries(t *testing.T) {
	t.Parallel()
	const trials = 2000
	dest := amqpx.Destination("x", "stuck")
	for trial := range trials {
		var s amqpx.NackStreak
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		renewed := false
		for attempt := 1; attempt <= DefaultMaxAttempts && !renewed; attempt++ {
			s.Record(dest, true, now)
			next := now.Add(retryDelay(attempt, DefaultRetryMin, DefaultRetryMax))
			for tick := now; tick.Before(next) && !renewed; tick = tick.Add(time.Second) {
				_, renewed = s.Stale(tick, amqpx.NackedSessionLimit)
			}
			now = next
		}
		if !renewed {
			t.Fatalf("trial %d: a quiet relay on a stuck channel never renewed its session in %d attempts", trial, DefaultMaxAttempts)
		}
	}
}
