// Command reliability is warren's fault-injection suite: it proves, with an
// independent ledger, that no committed event is lost, none is applied twice
// where deduplication promises it, no rolled-back event escapes, hostile
// input ends in the right dead-letter queue, and no outbox row is stranded —
// while processes are killed, the broker, Postgres and Redis fail, and the
// webhook receiver misbehaves.
//
//	go run ./devtools/reliability -mode short   # CI: about 4 minutes, exit 1 on any problem
//	go run ./devtools/reliability -mode long    # release check: about 45 minutes, writes docs/reliability/RELIABILITY.md
//	make reliability                            # the short mode
//	go run ./devtools/reliability -faults memory-alarm,dlq-shovel=2   # only these kinds
//	go run ./devtools/reliability -relay-mode cdc   # the CDC relays (make reliability-cdc); long: RELIABILITY-cdc.md
//	go run ./devtools/reliability -broker cluster   # a three-node cluster (make reliability-cluster); long: RELIABILITY-cluster.md
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
// # On a cluster
//
// With -broker cluster the harness starts a private three-node RabbitMQ
// cluster (localrabbit.StartCluster) instead of one node. Every process is
// given the three nodes' URLs in AMQP_URL, comma-separated (each dial
// starts from a random node, so the processes spread over the nodes), and
// the consumers WARREN_QUEUE_TYPE=quorum: their queues, retry tiers and
// DLQs are quorum queues, dead-lettering at least once. Among the faults,
// each injected with the one that brings its node back right after it:
// kill -9 of the node leading the webhook queue, then its restart (it
// rejoins), and stop_app of a node leading neither consumer's queue, then
// its start_app. Each half is measured like any fault (the time until a
// probe reaches both consumers' effects), plus the time until every
// process that was connected to the lost node is connected to another and
// ready again; the report lists every cluster fault with its figures. No
// process may exit on a node's loss: it must reconnect by itself, and an
// exit then fails the run by name. The connection close runs on every
// node; the memory alarm is raised on the queue leader only (an alarm on
// any node blocks publishers on all of them); the single node's stop_app
// and its outage are left out, and the report says why. A duplicate
// webhook delivery is laid to a node's loss only if the replica that
// posted first was connected to that node and the node went while the
// event was in flight there.
//
// # How it checks
//
// The workload commits Plane-shaped work-item changes through examples/app
// and the outbox, rolling some back on purpose; every transaction also
// writes its events' ids to a ledger table, so which events committed is
// known even when a COMMIT fails with an unknown outcome. Beside it, a
// writer commits business rows to a partitioned table captured by
// outbox/capture's triggers, through every way to write it in turn: the
// parent, a partition named directly, each also under SET LOCAL
// session_replication_role = replica, inserts and updates. Each reads
// the event its trigger wrote back from the outbox in the same
// transaction and puts its id in the ledger, so the same check holds it
// to its delivery; a write that committed with no event gets a ledger row
// named "no event: …" that nothing can deliver, and the run fails naming
// it. Faults are injected one at a time: processes killed and frozen, the broker's
// connections closed, the broker restarted, stopped for an outage (15s in
// the short mode, a minute in the long one) and put in a memory alarm (every
// relay and consumer is stopped with SIGTERM while it holds, and must stop
// within its grace plus a bound), Postgres backends terminated, Postgres
// restarted under load (a fast shutdown and a start, as pg_ctl restart -m
// fast does), Postgres and Redis stalled with SIGSTOP, Redis crashed and
// kept down, the receiver failing or slow, hostile input (among it, headers
// amqp091-go cannot read or too large to re-publish, which must be
// dead-lettered as undecodable without stalling the queue), and dead letters
// moved back to their queue with their headers (by dlq export/import and as
// a shovel does) while the handler fails once for them, and the captured
// table's schema changed under its writes (a partition created, a column
// added and a tracked one renamed, capture.Install run again as an
// operator must after a migration; between the rename and the install
// the writes fail, and none may commit without its event); after each, a probe
// event is timed to both consumers' effects. After the faults, the system
// drains (an event refused at every attempt, dead-lettered as exhausted, is
// replayed from its DLQ as an operator would) and the checker compares the receiver's deliveries, the
// automation's rule runs, the work items, both dead-letter queues and the
// outbox with the ledger. With the CDC relays, the slot is checked too:
// after every fault its confirmed position must pass the WAL position at the
// fault's lift, its lag (cdc.Status) must grow through a broker outage and
// fall back after it, it must survive a Postgres restart, and after the
// drain it must have passed the workload's last write.
//
// # Backpressure (polling relays)
//
// The polling relays run with --hold-back-queue on both consumers' queues
// (--high-water 200 in the short mode, 1,000 in the long one; ADR 028).
// One fault is an episode of its own (backpressure): both automation
// consumers are stopped with SIGTERM and kept down (30s in the short mode,
// the ten minutes in the long one) while the workload goes on. Once
// a second the harness reads both queues' depths, the outbox's pending
// rows, RabbitMQ's alarm list on every node and each relay's /metrics
// (warren_relay_held_back{queue}, what the WarrenRelayHeldBack alert
// selects). The run fails if the automation queue passes the mark by more
// than the relays' claims in flight, if no relay names the automation
// queue as the one holding it back (or names another), if the broker
// raises an alarm, or if the backlog does not grow in the outbox; the
// usual checks then hold the episode to nothing lost, nothing expired into
// a DLQ, and the catch-up once the consumers are back. The report's
// Backpressure section gives the queue's peak, the outbox's, when the hold
// began, the webhook's latency during the episode against before it (it
// waits with the stopped consumer, by design), and the drain's rate.
//
// # A large transaction (CDC relays)
//
// The CDC mode has one fault of its own (cdc-large-tx): one workload
// transaction of 20 × the relays' BatchSize events (--batch-size 50, so
// 1,000; the ledger expects each), its streaming relay's session ended,
// by kill -9 and SIGTERM in turn, each time it has trimmed 2 more batches
// of it. A relay publishes the 20 batches in about a tenth of a second, so
// where those ends fall is chance; one end is placed late in the
// transaction: the harness freezes both relays while the transaction
// commits, locks the rows of its last batch (the gate), lets them go on,
// and kills the streaming relay once its trim waits on that lock (Postgres
// says whom a backend waits for), when it has trimmed at least 14 of the
// 20 batches (a trim merges up to 5), then releases the lock. The slot
// must pass the transaction's commit within about twice as many session
// ends as the transaction has 2-batch steps, and again after the drain.
// A queue of the harness's bound to the exchange counts every copy the
// broker routes; a copy of an event already seen counts against the last
// session end before it arrived, and no end may exceed relay/cdc's
// documented bound, (BatchesInFlight + 1 + 2×4) × BatchSize (650). Those
// copies are the redeliveries the consumers' dedup absorbs, which the
// report's duplicates section counts. A relay that published a partly
// trimmed transaction from its start again (relay/cdc before settled_lsn)
// publishes the 14 or more trimmed batches again after the gate's kill
// and fails the run.
//
// See docs/reliability/RELIABILITY.md for the latest long run.
//
// # What would still break it
//
// Of backpressure, the suite runs a consumer stopped, not one that is slow
// but running: the hold then engages and lets go at every crossing of the
// marks, which only relay's own tests exercise. Its workload is far too
// small for an unheld broker to reach its memory alarm in ten minutes: what
// the episode proves is the bound on the queue (the mechanism), not an
// alarm avoided at scale. It watches no queue outside --hold-back-queue.
//
// Of the capture, the suite attacks only what its writer does: INSERT and
// UPDATE of single rows, through the parent, a partition and the replica
// role, and one column added and one renamed per schema fault, each
// followed by an Install. Outside that model: DELETE, COPY, INSERT … ON
// CONFLICT, bulk statements, TRUNCATE; a dropped column, a type change or
// a table rewrite; a partition attached (not created) or detached; a
// migration with no Install after it; the Record failure policy; logical
// replication's apply worker (its Subscriber policy); and ALTER TABLE …
// DISABLE TRIGGER by the table's owner, which the capture cannot prevent.
// And the check matches a captured event to its write by entity id and
// type only: an event with a wrong payload (a column left out, an old
// value) would pass.
//
// The large-transaction fault does not model:
//
//   - Session ends faster than a session can skip what is trimmed (a
//     broker that drops every connection within moments): relay/cdc's
//     own "What would still break it" says such a relay makes no
//     progress; the fault always lets a session trim 2 more batches.
//   - Transactions far larger than 20 batches, or several large ones
//     interleaved with the session ends; relay/cdc's tests cover 30,000
//     rows in one transaction.
//   - A relay of another BatchSize or BatchesInFlight than the harness
//     assumes: the bound is computed from the harness's own constants
//     (cdcBatchSize and relay/cdc's settleQueue, mirrored as
//     cdcSettleQueue because it is not exported).
//   - Which session a late copy belongs to: a copy the ended session
//     published just before its end but the broker routed after it counts
//     against that end, as in relay/cdc's own tests.
//   - A session that ends by itself during the fault (a publish or settle
//     timeout on a starved machine) is not one of the harness's ends: its
//     duplicates are charged to the harness's last end, which can then
//     exceed the bound though each end kept within it (a false failure,
//     never a hidden one).
package main
