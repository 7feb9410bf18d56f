// Package warrenprom exports warren's metrics to Prometheus. The core
// packages (consumer, relay, dedup) know nothing of Prometheus: they call
// an observer hook when one is configured, and this package (with
// warrenprom/relayprom for the relay) implements those hooks. A program
// that imports neither does not link client_golang.
//
// Every constructor registers its metrics on the [prometheus.Registerer]
// it is given, never on the global registry unless that is what is passed.
// One ConsumerMetrics (or DedupMetrics) serves every consumer (or store)
// of a process: their names become labels.
//
//	reg := prometheus.NewRegistry()
//	cm, _ := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
//	c, _ := consumer.New(consumer.Config{Name: "webhook", Observer: cm})
//	dm, _ := warrenprom.NewDedupMetrics(reg, warrenprom.DedupOptions{})
//	c.Use(middleware.Dedup(dm.Instrument(store, "webhook"), middleware.DedupOptions{}))
//	qd, _ := warrenprom.NewQueueDepths(reg, warrenprom.QueueDepthOptions{}, c.Topology())
//	go qd.Run(ctx)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Metrics
//
// Consumer ([ConsumerMetrics], labels consumer and, where noted,
// event_type):
//
//	warren_consumer_received_total                 deliveries taken by a worker
//	warren_consumer_messages_total                 settled deliveries by event_type and outcome
//	                                               (done, skipped, duplicate, retried,
//	                                               deferred, dead_lettered, requeued)
//	warren_consumer_dead_letters_total             dead letters by event_type and class
//	warren_consumer_handler_duration_seconds       histogram of the handler chain, by event_type
//	warren_consumer_in_flight                      deliveries being handled now
//	warren_consumer_last_message_timestamp_seconds when the latest delivery arrived
//	warren_consumer_lag_seconds               the latest settled event's age: lag in time
//	warren_consumer_connected                      1 while consuming, else 0
//	warren_consumer_connection_blocked             1 while the broker blocks the connection
//	                                               (a memory or disk alarm), else 0
//	warren_consumer_reconnects_total               sessions started after the first
//	warren_consumer_unavailable_total              deferred because a dependency was unavailable
//	                                               before the handler ran (no attempt spent)
//
// Queues ([QueueDepths], labels consumer, queue and role = main, retry or
// dlq), polled with a passive queue.declare on a channel of its own:
//
//	warren_queue_messages           messages ready in the queue
//	warren_queue_consumers          consumers attached to the queue
//	warren_queue_poll_errors_total  polls that failed (label consumer only)
//
// The relay's metrics are in package warrenprom/relayprom, so that a
// consumer service does not link the relay and pgx, and the CDC relay's
// (package relay/cdc: its counts, its slot's lag and status) in
// warrenprom/cdcprom.
//
// Deduplication ([DedupMetrics], label consumer):
//
//	warren_dedup_claims_total           claims by result (acquired, done, busy)
//	warren_dedup_store_duration_seconds histogram of store calls by op (claim, complete, release)
//	warren_dedup_store_errors_total     failed store calls by op
//
// # Cardinality
//
// event_type comes from producers, so it is bounded: the first
// MaxEventTypes distinct types (default 50) become label values and later
// ones are counted as "other", as are types over 100 bytes or not valid
// UTF-8; a body that did not decode counts as "unknown". Consumer, outbox
// and queue names come from configuration and are bounded by it.
//
// docs/grafana-dashboard.json is a dashboard on these metrics, and
// docs/alerts.md the alerts worth having.
package warrenprom
