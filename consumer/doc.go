// Package consumer provides BaseConsumer, the part of a warren service that
// talks to RabbitMQ: it declares the consumer's queue and its dead-letter
// and retry topology, consumes with a pool of workers, applies the ack
// policy to each handler's outcome, reconnects when the broker goes away,
// and drains gracefully on shutdown.
//
// # Topology
//
// A consumer named N on exchange E declares:
//
//	E            durable fanout exchange the producers publish to
//	N            durable queue bound to E; message TTL (default 1h);
//	             expired messages dead-letter to N.dlx
//	N.dlx        fanout exchange bound to N.dlq (Config.DeadLetterExchange)
//	N.dlq        dead messages, with their own TTL (default 7 days)
//	             (Config.DeadLetterQueue)
//	N.retry.<d>  one queue per retry delay d (default 1s, 10s, 1m, 10m),
//	             each with message TTL d, dead-lettering back to N through
//	             the default exchange
//
// Retries never pass through E, so other consumers on E never see them.
// Each tier holds messages of one delay, so a 1s retry never waits behind a
// 10m one (RabbitMQ expires messages only at the head of a queue).
// Each start plans before it declares: it looks (passively) at what
// exists, checks that each existing exchange and queue has the arguments
// the consumer needs, and only then declares what is missing, so a start
// refused for a conflict leaves nothing new behind; a declaration refused
// midway deletes what that start created, if empty. It logs one line,
// "topology declared", with the queue's arguments, what it found and what
// it added.
//
// A queue declared by someone else (Plane's services declare theirs with
// a TTL and a dead-letter exchange shared by all of them) is a
// TopologyError naming the argument that differs, unless
// Config.AdoptQueue: the consumer then takes the queue as it is. AMQP
// returns no queue's arguments, so it learns them from the broker's
// refusals of declarations with other ones (see probe.go); one it cannot
// learn is an error, never a guess. There must be a queue to adopt: a
// start that finds none fails and declares nothing (a queue declared from
// the config would have arguments its owner's declaration is refused
// with, so rolling back to the owner would fail), and a probe whose
// declaration created the queue, deleted after the passive check found
// it, says so too (see probe.go). Once adopted, a queue deleted under the
// running consumer is declared again with the arguments learned, so its
// owner can still declare it. The queue's TTL and dead-letter
// exchange apply; the DLQ is bound to that exchange only when
// Config.DeadLetterExchange names it, since a fanout exchange other queues
// dead-letter to would bring their expired messages into this DLQ.
// Retries and the consumer's own dead letters go through the default
// exchange and work on any queue.
//
// A retry tier or DLQ that an operator deleted is declared again by the
// first retry or dead letter that finds it missing; the declaration gets
// up to 10s, then the session is given up and the topology declared on a
// new connection.
//
// # Partitions
//
// With Config.Partitions set, the consumer declares, instead of the queue
// N, a consistent-hash exchange N.partitions bound to E and partition
// queues N.p0 … with single active consumer, hashed on the
// warren.HeaderEntityID header: replicas share the partitions, one active
// per partition, and each entity's events are handled in order, one at a
// time, a failure retried in place. See docs/partitions.md.
//
// # Ack policy
//
// A message leaves the queue only after the message that replaces it is
// safe: a retry or dead letter is published, the broker's confirm awaited,
// and only then is the original acked. See [BaseConsumer.Run] for shutdown.
//
//	handler returns            what happens
//	nil                        ack
//	warren.Skip, Duplicate     ack, counted as skipped / duplicate
//	error, RetryAfter, panic   to a retry tier with attempts+1; after
//	                           MaxAttempts, to the DLQ (class exhausted)
//	warren.Defer               to a retry tier, attempt not spent
//	warren.Permanent           to the DLQ (class permanent)
//	undecodable body           to the DLQ (class undecodable)
//	headers the client cannot  to the DLQ (class undecodable), no
//	read                       handler called
//	no handler matches         ack as skipped, or DLQ (class unhandled)
//	                           under DeadLetterUnhandled
//
// Dead messages carry the headers of package dlq: the error, its class,
// attempts, first and last failure, origin queue, exchange and routing key,
// consumer and host. Nothing the consumer publishes carries RabbitMQ's
// death headers (x-death and the like; see dlq.StripDeaths): on a dead
// message moved back to N with them, the retry tier's dead-letter back to N
// would be a cycle, which the broker resolves by dropping the message.
//
// Those headers are believed only on a delivery through the default
// exchange, the way retry tiers, replays and imports bring a message back.
// Anything published to the consumer's exchange (or another named exchange
// bound to its queue) is a first delivery, whatever its headers say:
// attempt 1, its dlq headers and death headers dropped (dlq.StripHistory)
// before anything reads or stamps them, so a producer can neither spend an
// event's attempts nor write the origin an operator's replay would use.
//
// A producer can send headers amqp091-go refuses to read (nested more than
// 32 deep, more than 8192 entries, over frame_max once the broker's x-death
// grew them): the connection would close at every delivery of such a
// message and the queue behind it stall for ever. The consumer's
// connections read through a filter (package internal/amqpx) that replaces
// those entries with dlq.HeaderUnreadable, so the message arrives and is
// dead-lettered as undecodable with the reason, in the time any
// undecodable message takes. A producer setting that header itself only
// gets its message dead-lettered. Headers the client reads but that leave
// no room for warren's record (and the broker's x-death on a retry hop)
// are dropped from the copy a retry, deferral or dead letter publishes
// (dlq.Fit, marked dlq.HeaderDropped): the copy keeps the event and its
// record, and comes back readable. See docs/adr/025-unreadable-headers.md,
// with what would still break it.
//
// Package consumertest runs a message through a consumer's middleware and
// handlers without a broker and reports which of these the consumer would
// do, deciding with the same code the workers run.
//
// # Connections
//
// The consumer runs its own supervisor rather than amqp091-go's built-in
// recovery (docs/adr/001-own-connection-supervisor.md): each connection is
// a session with its own channels, and a delivery is only ever acked on the
// channel that delivered it.
//
// # Memory
//
// MaxBodyBytes is checked after a body arrived; what the broker may send
// first is bounded by its max_message_size. Each session reads that limit
// (a probe publish on a connection of its own, or
// Config.BrokerMaxMessageSize), logs the worst case, Channels × prefetch ×
// limit + Workers × the largest decoded body, and under
// Config.MemoryBudget lowers the prefetch to fit or refuses to start
// (ErrOverMemoryBudget). A limit the probe cannot read (the broker
// accepts the probe) is planned at RabbitMQ's maximum, 512 MiB. See
// docs/adr/003-memory-budget.md.
//
// # Seeing what happens
//
// [BaseConsumer.Stats] counts every disposition; [BaseConsumer.HealthHandler]
// serves /healthz (failing when Run has stopped, or when handlers have
// held deliveries for Config.StuckAfter without one finishing) and
// /readyz (connected and consuming, every Config.Dependencies up, and not
// blocked by a broker alarm: each fails readiness but not liveness, since
// restarting brings neither a store nor the broker back). Config.Observer
// receives each delivery's fate and each connection change, and, if it
// implements [BlockObserver], each block and unblock (package warrenprom turns them into
// Prometheus metrics, without the consumer linking Prometheus), and
// Config.TracerProvider records a span around each handler, a child of the
// W3C traceparent the message carries from outbox.Publish.
package consumer
