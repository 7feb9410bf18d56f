package consumer

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology is the set of names a consumer declares. Its methods are how the
// consumer, the DLQ tooling and tests agree on names.
type Topology struct {
	Exchange string      // the fanout exchange events arrive on
	Queue    string      // the consumer's queue; with partitions, not declared (PartitionQueues replace it)
	DLX      string      // where the broker sends messages that expire in Queue (or a partition queue)
	DLQ      string      // dead messages
	Retry    []RetryTier // none with partitions: failures are retried in place

	// PartitionExchange is the x-consistent-hash exchange Queue.partitions,
	// bound to Exchange, that spreads events over PartitionQueues by their
	// entity id header. Empty unless Config.Partitions is set.
	PartitionExchange string
	// PartitionQueues are Queue.p0, Queue.p1, …, one per partition.
	PartitionQueues []string
	// Replicas is the queue Queue.replicas on which every replica of a
	// partitioned consumer keeps one consumer, so that each can count
	// them (a quorum queue with single active consumer counts only the
	// active one). Nothing is published to it.
	Replicas string
}

// RetryTier is one retry queue: messages wait Delay in it, then the broker
// dead-letters them back to the consumer's queue.
type RetryTier struct {
	Delay time.Duration
	Queue string
}

// TopologyFor returns the names a consumer with cfg declares.
func TopologyFor(cfg Config) Topology {
	cfg = cfg.withDefaults()
	t := Topology{
		Exchange: cfg.Exchange,
		Queue:    cfg.Name,
		DLX:      cfg.DeadLetterExchange,
		DLQ:      cfg.DeadLetterQueue,
	}
	if cfg.Partitions > 0 {
		t.PartitionExchange = PartitionExchangeName(cfg.Name)
		t.Replicas = cfg.Name + ".replicas"
		for i := range cfg.Partitions {
			t.PartitionQueues = append(t.PartitionQueues, PartitionQueueName(cfg.Name, i))
		}
		return t
	}
	for _, d := range cfg.RetryDelays {
		t.Retry = append(t.Retry, RetryTier{Delay: d, Queue: cfg.Name + ".retry." + shortDuration(d)})
	}
	return t
}

// PartitionExchangeName is the consistent-hash exchange of the partitioned
// consumer name: name.partitions.
func PartitionExchangeName(name string) string { return name + ".partitions" }

// PartitionQueueName is partition i's queue of the partitioned consumer
// name: name.p<i>.
func PartitionQueueName(name string, i int) string { return fmt.Sprintf("%s.p%d", name, i) }

// Partitioned reports whether the topology is a partitioned consumer's.
func (t Topology) Partitioned() bool { return len(t.PartitionQueues) > 0 }

// Queues lists every queue the consumer declares: its queue, or with
// partitions its partition queues, then the DLQ and the retry tiers.
func (t Topology) Queues() []string {
	qs := []string{t.Queue}
	if t.Partitioned() {
		qs = append(slices.Clone(t.PartitionQueues), t.Replicas)
	}
	qs = append(qs, t.DLQ)
	for _, r := range t.Retry {
		qs = append(qs, r.Queue)
	}
	return qs
}

// Exchanges lists every exchange the consumer declares: the events
// exchange, the dead-letter exchange and, with partitions, the partition
// exchange.
func (t Topology) Exchanges() []string {
	xs := []string{t.Exchange, t.DLX}
	if t.PartitionExchange != "" {
		xs = append(xs, t.PartitionExchange)
	}
	return xs
}

// shortDuration names a delay the way an operator writes it: 1s, 10m, 1h,
// 1500ms.
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.name)
		}
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// tierFor picks the retry tier for a failure: the hint's smallest tier at
// least as long, or without a hint the tier of the attempt that failed.
func (t Topology) tierFor(attempt int, hint time.Duration) RetryTier {
	if hint > 0 {
		for _, r := range t.Retry {
			if r.Delay >= hint {
				return r
			}
		}
		return t.Retry[len(t.Retry)-1]
	}
	i := max(attempt-1, 0)
	return t.Retry[min(i, len(t.Retry)-1)]
}

// TopologyError reports a declaration the broker refused. When an existing
// queue or exchange was declared with different arguments, Argument names
// the one that differs.
type TopologyError struct {
	Kind     string // "queue", "exchange" or "binding"
	Name     string
	Argument string // e.g. "x-message-ttl"; empty when the cause is not a mismatch
	Err      error

	adoptable bool // the consumer's own queue, which Config.AdoptQueue can take as it is
}

func (e *TopologyError) Error() string {
	switch {
	case e.Argument != "" && e.adoptable:
		return fmt.Sprintf("declare %s %q: it exists with a different %s; set AdoptQueue to consume it as it is, change the config to match, or delete it (%v)", e.Kind, e.Name, e.Argument, e.Err)
	case e.Argument != "":
		return fmt.Sprintf("declare %s %q: it exists with a different %s; delete it or change the config to match (%v)", e.Kind, e.Name, e.Argument, e.Err)
	}
	return fmt.Sprintf("declare %s %q: %v", e.Kind, e.Name, e.Err)
}

func (e *TopologyError) Unwrap() error { return e.Err }

// ErrNoConsistentHash is wrapped by the TopologyError of a partitioned
// consumer (Config.Partitions) on a broker without the consistent-hash
// exchange type. Run returns it at once: retrying cannot help.
var ErrNoConsistentHash = errors.New("the broker has no x-consistent-hash exchange type: enable the rabbitmq_consistent_hash_exchange plugin (rabbitmq-plugins enable rabbitmq_consistent_hash_exchange), which Partitions needs")

// errPartitionLeft: what another Partitions setting of the consumer
// declared exists and would go on taking copies of the events nobody
// consumes: a partition queue past Config.Partitions, the partition
// exchange of a consumer that is no longer partitioned, or the queue of a
// consumer that now is.
var errPartitionLeft = errors.New("left from another Partitions setting")

var inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']+)'`)

func topologyError(kind, name string, err error) *TopologyError {
	te := &TopologyError{Kind: kind, Name: name, Err: err}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		if m := inequivalentArg.FindStringSubmatch(ae.Reason); m != nil {
			te.Argument = m[1]
		}
	}
	return te
}

// fatal reports whether a declaration error is one reconnecting cannot fix:
// a mismatch with existing queues, an argument the consumer cannot learn,
// or missing permissions.
func (e *TopologyError) fatal() bool {
	var ae *amqp.Error
	if errors.Is(e.Err, errCannotAdopt) || errors.Is(e.Err, ErrNoConsistentHash) || errors.Is(e.Err, errPartitionLeft) {
		return true
	}
	return errors.As(e.Err, &ae) && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.AccessRefused)
}
