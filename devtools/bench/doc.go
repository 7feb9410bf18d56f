// Command bench measures warren against the bare client libraries doing the
// same work in the same run, and writes the ratios to RESULTS.md and a
// chart of them to ratios.png.
//
// Every scenario has a raw baseline written with amqp091-go, pgx and
// go-redis alone, and one or more warren variants:
//
//   - consume: drain a queue with a no-op handler;
//   - consume + redis dedup, consume + postgres dedup: the same with one
//     deduplication write per message (raw) against the Dedup middleware's
//     lease (warren);
//   - relay: move an outbox backlog to the broker with confirms;
//   - contracts (contracts.go): the consume drain with a warren.Typed
//     handler, alone and behind contract.Middleware, and producers
//     committing through outbox.Publish with and without Options.Check,
//     each against warren's own untyped or unchecked path (issue 36);
//   - commit → publish latency: a steady 1,000 events/s through the outbox,
//     a 250 ms poller against the relay woken by LISTEN/NOTIFY (p50, p99);
//   - cdc (cdc.go): the relay that streams the outbox from a logical
//     replication slot (relay/cdc) draining the relay scenario's backlog
//     beside the raw loop and relay.Run; its commit → publish latency at
//     1,000 events/s; and the producers' own commits/s with no relay, with
//     it, with relay.Run, and deleting their rows themselves (option 1 of
//     docs/adr/020-cdc-relay.md). Postgres needs wal_level = logical
//     (scripts/services.sh); every slot made is dropped after its
//     measurement;
//   - memory: peak RSS of a consumer and of a relay, each in a subprocess
//     of this binary, over -rss-messages messages;
//   - capture: bulk and single-row UPDATEs of a table without a trigger
//     and with warren's generated capture trigger (and, for comparison,
//     row-level triggers written by hand);
//   - growth (growth*.go): throughput and p99 as the work grows — consumer
//     workers 1 to 64, payloads of 300 B to 64 KiB, 1 to 4 relays on one
//     table, an outbox backlog of 10k and 1M rows — each point a scenario
//     of raw against warren, drawn as one chart per dimension
//     (growth-*.png) and reported under "How cost grows";
//   - cluster (cluster.go): consume, consume + redis dedup and relay on the
//     shared single node with classic queues and on a private three-node
//     cluster with quorum queues (localrabbit.StartCluster, started for
//     the run in a temporary directory and stopped at its end), raw and
//     warren on each, reported as one table of cluster ÷ single and
//     warren ÷ raw ratios (CLUSTER-RESULTS.md);
//   - sizing (sizing.go): what one unit carries, for docs/scaling.md —
//     1, 2 and 4 queues drained at once on one node (classic and quorum)
//     and on the cluster, 1 and 2 consumer replicas on one queue, and
//     relays: 1 and 2 on one table, one process draining two tables, one
//     relay publishing to quorum queues (SIZING-RESULTS.md).
//
// Consume, consume + redis dedup and relay also have peer variants:
// Watermill, what a Go team would pick instead of warren (watermill-amqp's
// router; its Deduplicator on a Redis key repository written here, since
// Watermill ships none; watermill-sql's Forwarder to AMQP). The best peer
// gives each warren variant there a second ratio, with a target of its own.
//
// Variants run alternately for several rounds on equal workloads; the
// report gives each one's median and spread and the ratio of medians to
// the best baseline, because absolute numbers on a shared machine drift
// from run to run and ratios mostly do not. It checks each warren variant
// against the targets and says why a missed one was missed.
//
//	make bench                                      everything, defaults (about an hour on 2 cores)
//	go run . -run growth                            the growth scenarios alone (about 10 quiet minutes)
//	go run . -run relay -messages 5000 -rounds 3    one scenario, smaller
//	go run . -run memory -rss-messages 1000000      the memory run
//	go run . -run cdc                               the CDC relay's scenarios
//	go run . -run cluster -rounds 3                 single node vs three-node cluster (about 4 minutes)
//	go run . -run sizing -rounds 3                  the sizing guide's figures (about 7 minutes)
//
// Where the time goes per message is measured apart, with go test's
// benchmarks: BenchmarkConsume and BenchmarkRelay drain a backlog with
// the scenarios' own raw and warren code, one op per message, and report
// allocs/op, B/op and cpu-µs/msg. PROFILES.md has their figures, the top
// of a CPU profile of each side and the commands that reproduce them:
//
//	go test -run '^$' -bench 'Consume|Relay' -benchmem -benchtime 20000x
//
// It lives in its own module so its dependencies (gonum's plot, Watermill)
// stay out of warren's. The services are the ones the tests use (AMQP_URL,
// DATABASE_URL, REDIS_URL, with the same local defaults); every
// measurement makes its own queues, tables and keys and removes them.
package main
