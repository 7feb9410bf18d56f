// Package relayprom exports the outbox relays' metrics to Prometheus: it
// implements [relay.Observer], which the polling relay (package relay) and
// the CDC relay (relay/cdc, Config.Observer) both call, so one set of
// relay metrics serves either mode; package cdcprom adds the slot's. The
// CDC relay does not poll: for it the wake-up counter stays at zero. It is apart from package warrenprom so
// that a consumer service exporting metrics does not link the relay and
// pgx, nor a relay sidecar the consumer.
//
//	reg := prometheus.NewRegistry()
//	rm, _ := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
//	r, _ := relay.New(relay.Config{DatabaseURL: url, Observer: rm})
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//	http.Handle("/", r.HealthHandler()) // /healthz and /readyz
//
// Metrics (label outbox, the table's name):
//
//	warren_relay_published_total              rows confirmed by the broker
//	warren_relay_publish_failures_total       publishes nacked, returned, timed out or lost
//	warren_relay_dead_rows_total              rows that became dead
//	warren_relay_wakeups_total                worker wake-ups by source (notify, poll)
//	warren_relay_publish_confirm_seconds      histogram: publish to the broker's verdict
//	warren_relay_outbox_latency_seconds       histogram: producer's transaction to confirm
//	warren_relay_connection_blocked           1 while the broker blocks the relay's connection
//	warren_relay_held_back                    1 while a queue (label) holds the relay back (HoldBack)
//	warren_relay_queue_ready_messages         ready messages in each HoldBack queue: a consumer's lag
//	warren_relay_queue_consumers              consumers of each HoldBack queue
//	warren_outbox_pending_rows                pending rows (in flight and retrying included)
//	warren_outbox_in_flight_rows              pending rows leased to a relay now
//	warren_outbox_retrying_rows               pending rows waiting out a retry delay
//	warren_outbox_dead_rows                   dead rows
//	warren_outbox_lapsed_rows                 pending rows whose claim lapsed unsettled (a relay or Plane's poller died holding them)
//	warren_outbox_delivered_rows              delivered rows kept by KeepDelivered
//	warren_outbox_oldest_pending_age_seconds  age of the oldest pending row
//	warren_outbox_capture_errors              changes whose events a capture trigger could not write (outbox/capture, record policy)
//
// The warren_outbox_* gauges describe the whole table, whichever relay
// reports them (every Config.StatsInterval): with several relays on one
// table, aggregate them with max, not sum.
package relayprom
