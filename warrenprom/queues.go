package warrenprom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/warrenprom/internal/promreg"
)

// QueueDepthOptions configures [NewQueueDepths]. The zero value is ready
// to use.
type QueueDepthOptions struct {
	// URL of the broker, or of several nodes of one cluster separated by
	// commas (see consumer.Config.URL). Default
	// amqp://guest:guest@127.0.0.1:5672/.
	// Logged only with the password redacted.
	URL string

	// Interval between polls. Each poll is one passive queue.declare per
	// queue. Default 15s, a typical scrape interval.
	Interval time.Duration

	// Name is the poller's AMQP connection name. Default
	// "warren queue depths@<host>".
	Name string

	// Logger receives connection changes and failed polls. Default
	// slog.Default().
	Logger *slog.Logger
}

// DefaultPollInterval is QueueDepthOptions.Interval's default.
const DefaultPollInterval = 15 * time.Second

// QueueDepths polls the depth of consumers' queues — the main queue, each
// retry tier and the DLQ — on a connection and channel of its own, with a
// passive queue.declare per queue and interval: the broker's answer
// carries the message and consumer counts, and asking costs nothing
// per message consumed.
type QueueDepths struct {
	opts      QueueDepthOptions
	queues    []watchedQueue
	messages  *prometheus.GaugeVec
	consumers *prometheus.GaugeVec
	errors    *prometheus.CounterVec
	started   atomic.Bool
}

type watchedQueue struct{ consumer, queue, role string }

func (w watchedQueue) labels() []string { return []string{w.consumer, w.queue, w.role} }

// NewQueueDepths registers the queue gauges on reg for the queues of the
// given topologies (consumer.BaseConsumer.Topology, or
// consumer.TopologyFor). Call Run to poll.
func NewQueueDepths(reg prometheus.Registerer, opts QueueDepthOptions, topologies ...consumer.Topology) (*QueueDepths, error) {
	if len(topologies) == 0 {
		return nil, errors.New("warrenprom: NewQueueDepths: no topology to poll")
	}
	opts.URL = cmp.Or(opts.URL, amqpx.DefaultURL)
	opts.Interval = cmp.Or(opts.Interval, DefaultPollInterval)
	if opts.Interval < 0 {
		return nil, fmt.Errorf("warrenprom: NewQueueDepths: negative Interval %v", opts.Interval)
	}
	opts.Name = cmp.Or(opts.Name, "warren queue depths@"+amqpx.Hostname())
	// Redacted and with durations for people, as every warren logger.
	opts.Logger = redact.Logger(cmp.Or(opts.Logger, slog.Default()))
	q := &QueueDepths{
		opts: opts,
		messages: promreg.GaugeVec("warren_queue_messages",
			"Messages ready in a consumer's queue (role main, retry or dlq), polled with a passive queue.declare.", "consumer", "queue", "role"),
		consumers: promreg.GaugeVec("warren_queue_consumers",
			"Consumers attached to a consumer's queue (role main, retry or dlq).", "consumer", "queue", "role"),
		errors: promreg.CounterVec("warren_queue_poll_errors_total",
			"Queue depth polls of one queue that failed (the queue is missing, or the connection failed). A queue whose poll fails, or every queue while the broker is unreachable, has no gauges until a poll succeeds.", "consumer"),
	}
	for _, t := range topologies {
		q.queues = append(q.queues, watchedQueue{t.Queue, t.Queue, "main"})
		for _, r := range t.Retry {
			q.queues = append(q.queues, watchedQueue{t.Queue, r.Queue, "retry"})
		}
		q.queues = append(q.queues, watchedQueue{t.Queue, t.DLQ, "dlq"})
		q.errors.WithLabelValues(t.Queue)
	}
	if err := promreg.Register(reg, q.messages, q.consumers, q.errors); err != nil {
		return nil, err
	}
	return q, nil
}

// Run polls until ctx ends, reconnecting when the broker goes away, and
// returns nil; or it returns the error of a broker that refused the
// credentials or the vhost, which reconnecting does not mend. It may be
// called once.
func (q *QueueDepths) Run(ctx context.Context) error {
	if !q.started.CompareAndSwap(false, true) {
		return errors.New("warrenprom: QueueDepths.Run called twice")
	}
	log := q.opts.Logger.With("component", "warren queue depths")
	// DialRetry resets its backoff at every call: the pauses after a lost
	// connection draw from another, or they would never grow.
	dial := amqpx.NewBackOff(q.opts.Interval)
	pause := amqpx.NewBackOff(q.opts.Interval)
	for {
		conn, err := amqpx.DialRetry(ctx, q.opts.URL, amqpx.DialOptions{Name: q.opts.Name}, dial, log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err // the broker refused the credentials or the vhost
		}
		log.Debug("polling queue depths", "url", amqpx.RedactURLs(q.opts.URL), "queues", len(q.queues), "interval", q.opts.Interval)
		started := time.Now()
		err = q.pollUntilLost(ctx, conn)
		amqpx.CloseConnection(conn, amqpx.CloseTimeout) // bounded: a silent broker must not hang the stop
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("queue depth polling lost the broker; reconnecting", "error", err)
		q.forgetAll()
		if time.Since(started) > q.opts.Interval { // it worked for a while: start the pauses over
			pause.Reset()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause.NextBackOff()):
		}
	}
}

// pollUntilLost polls every interval until ctx ends (nil) or conn fails.
func (q *QueueDepths) pollUntilLost(ctx context.Context, conn *amqp.Connection) error {
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			amqpx.CloseChannel(conn, ch)
		}
	}()
	t := time.NewTicker(q.opts.Interval)
	defer t.Stop()
	for {
		for _, w := range q.queues {
			// Bounded by ctx and the interval, the channel's opening too: a
			// broker that stops answering must neither hang Run's stop nor
			// freeze the gauges.
			var info amqp.Queue
			pctx, cancel := context.WithTimeout(ctx, max(q.opts.Interval, amqpx.CloseTimeout))
			err := amqpx.Bound(pctx, conn, func() (err error) {
				if ch == nil {
					if ch, err = conn.Channel(); err != nil {
						return fmt.Errorf("open channel: %w", err)
					}
				}
				info, err = ch.QueueDeclarePassive(w.queue, false, false, false, false, nil)
				return err
			})
			cancel()
			if err != nil {
				// A missing queue closes the channel: open a new one for
				// the next queue.
				if ch != nil {
					ch.Close()
					ch = nil
				}
				q.errors.WithLabelValues(w.consumer).Inc()
				q.forget(w)
				q.opts.Logger.Debug("queue depth poll failed", "queue", w.queue, "error", err)
				if conn.IsClosed() {
					return err
				}
				continue
			}
			q.messages.WithLabelValues(w.labels()...).Set(float64(info.Messages))
			q.consumers.WithLabelValues(w.labels()...).Set(float64(info.Consumers))
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-closed:
			if err == nil {
				return amqp.ErrClosed
			}
			return err
		case <-t.C:
		}
	}
}

// forget removes a queue's gauges: a stale depth is worse than none.
func (q *QueueDepths) forget(w watchedQueue) {
	q.messages.DeleteLabelValues(w.labels()...)
	q.consumers.DeleteLabelValues(w.labels()...)
}

func (q *QueueDepths) forgetAll() {
	for _, w := range q.queues {
		q.forget(w)
	}
}
