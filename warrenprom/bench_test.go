package warrenprom_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/warrenprom"
)

// BenchmarkConsumerObserver is what metrics add to each message: one
// Received and one Settled, from many workers at once. Compare it with a
// consumer's cost per message (bench/: the "metrics" scenario).
func BenchmarkConsumerObserver(b *testing.B) {
	cm, err := warrenprom.NewConsumerMetrics(prometheus.NewRegistry(), warrenprom.ConsumerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	types := []string{"workitem.created", "workitem.updated", "cycle.created", "comment.created"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			cm.Received("webhook")
			cm.Settled("webhook", consumer.Settlement{EventType: types[i%len(types)], Disposition: consumer.Done, HandlerDuration: 800 * time.Microsecond})
			i++
		}
	})
}
