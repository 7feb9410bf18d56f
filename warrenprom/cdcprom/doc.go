// Package cdcprom exports the CDC relay's metrics (package relay/cdc) to
// Prometheus. It is apart from relayprom so that a polling relay's sidecar
// does not link the logical replication client.
//
// The relay metrics both relays share (publishes, failures, dead rows,
// latencies, the table's gauges such as the oldest pending row's age)
// come from relayprom, given to the relay as its Config.Observer; this
// package adds only what the polling relay has not: whether the process
// streams the slot, and the slot's own gauges. (Before 0.2 it also
// exported warren_cdc_relay_published_total,
// warren_cdc_relay_dead_rows_total and
// warren_cdc_oldest_pending_age_seconds, which counted what relayprom's
// warren_relay_published_total, warren_relay_dead_rows_total and
// warren_outbox_oldest_pending_age_seconds count.)
//
// [Metrics] reads whether each relay streams, and asks Postgres for the
// slot's status through [cdc.Status], when Prometheus scrapes:
//
//	reg := prometheus.NewRegistry()
//	rm, _ := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{}) // what both relays report
//	m, _ := cdcprom.New(reg, pool, cdcprom.Options{})                  // the slot
//	r, _ := cdc.New(cdc.Config{Pool: pool, Observer: rm})
//	m.Watch(r)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//	http.Handle("/", r.HealthHandler()) // /healthz and /readyz
//
// Metrics (labels outbox, the table's name, and slot, the group's
// replication slot):
//
//	warren_cdc_relay_streaming              1 while one of this process's relays streams the slot, else 0
//	warren_cdc_slot_active                  1 while any relay streams the slot (Postgres's view), else 0
//	warren_cdc_slot_lag_bytes               WAL the server keeps for the slot
//	warren_cdc_slot_wal_status              1, labelled wal_status: reserved, extended, unreserved or lost
//	warren_cdc_slot_status_errors_total     scrapes whose read of the slot's status failed
//
// The slot gauges describe the group, whichever relay's process reports
// them: with several relays on one slot, aggregate them with max. They are
// left out of a scrape whose read fails (a stale lag is worse than none)
// or finds no slot yet.
package cdcprom
