// Command reliability is warren's fault-injection suite: it proves, with an
// independent ledger, that no committed event is lost, none is applied twice
// where deduplication promises it, no rolled-back event escapes, hostile
// input ends in the right dead-letter queue, and no outbox row is stranded —
// while processes are killed, the broker, Postgres and Redis fail, and the
// webhook receiver misbehaves.
//
//	go run ./devtools/reliability -mode short   # CI: about 4 minutes, exit 1 on any problem
//	go run ./devtools/reliability -mode long    # release check: about 45 minutes, writes the root's RELIABILITY.md
//	make reliability                            # the short mode
//	go run ./devtools/reliability -faults memory-alarm,dlq-shovel=2   # only these kinds
//	go run ./devtools/reliability -relay-mode cdc   # the CDC relays (make reliability-cdc); long: RELIABILITY-cdc.md
//
// # What it runs
//
// It never touches the shared services. It starts its own RabbitMQ node (the
// machine's rabbitmq-server, its own node name, ports, data directory and
// Erlang cookie), PostgreSQL cluster (initdb in a temporary directory) and
// Redis server, on free ports, and stops and deletes them at the end, also
// on failure and on SIGINT/SIGTERM. It builds the real binaries from the
// checkout and runs two relays (warren relay run; with -relay-mode cdc,
// warren relay run --mode cdc, both naming one replication slot, which one
// streams while the other stands by, on a cluster started with wal_level =
// logical), two webhook consumers (examples/webhook/cmd/webhook) and two
// automation consumers (examples/automation/cmd/automation) as supervised
// subprocesses, configured by environment variables and restarted after
// every exit. The webhook's HTTP receiver runs inside the harness: it is the
// ledger of the webhook's effect.
//
// # How it checks
//
// The workload commits Plane-shaped work-item changes through examples/app
// and the outbox, rolling some back on purpose; every transaction also
// writes its events' ids to a ledger table, so which events committed is
// known even when a COMMIT fails with an unknown outcome. Faults are
// injected one at a time: processes killed and frozen, the broker's
// connections closed, the broker restarted, stopped for an outage (15s in
// the short mode, a minute in the long one) and put in a memory alarm (every
// relay and consumer is stopped with SIGTERM while it holds, and must stop
// within its grace plus a bound), Postgres backends terminated, Postgres
// restarted under load (a fast shutdown and a start, as pg_ctl restart -m
// fast does), Postgres and Redis stalled with SIGSTOP, Redis crashed and
// kept down, the receiver failing or slow, hostile input, and dead letters
// moved back to their queue with their headers (by dlq export/import and as
// a shovel does) while the handler fails once for them; after each, a probe
// event is timed to both consumers' effects. After the faults, the system
// drains and the checker compares the receiver's deliveries, the
// automation's rule runs, the work items, both dead-letter queues and the
// outbox with the ledger. With the CDC relays, the slot is checked too:
// after every fault its confirmed position must pass the WAL position at the
// fault's lift, its lag (cdc.Status) must grow through a broker outage and
// fall back after it, it must survive a Postgres restart, and after the
// drain it must have passed the workload's last write. See RELIABILITY.md at
// the checkout's root for the latest long run.
package main
