package relay

import (
	"time"

	"github.com/warrenmq/warren/outbox"
)

// Observer is told what a relay does, so that metrics can count it
// without the relay depending on a metrics library; package
// warrenprom/relayprom implements it for Prometheus. Its methods are called concurrently from
// the relay's goroutines and must return quickly without blocking. With
// no Observer configured, each call site costs one nil check.
//
// Both relays (package relay and relay/cdc) call it from their publishing
// path. A method that panics costs only that report: the relay recovers
// it and logs "the Observer panicked" at Error level with the method and
// the stack, at most once per method every 10 seconds (a count says how
// many it did not log). Unrecovered, the panic would end the process
// between the broker's confirm and the settle, and the restarted relay
// would publish that batch again. A method that calls runtime.Goexit
// (t.FailNow in a test double) cannot be stopped: it is logged, and the
// relay's goroutine that called it ends, which stalls that relay.
//
// A method that blocks is not guarded against. It holds publishing; the
// polling relay then reports its workers stuck (/healthz fails, so a
// liveness probe restarts it), while the CDC relay goes on saying ready;
// and Run's stop waits for it, past the bound the package documentation
// gives, so a process that is killed meanwhile publishes again what was
// confirmed but not settled.
type Observer interface {
	// Woken is called each time a worker that was waiting wakes to claim
	// rows: byNotify is true when a notification woke it, false when its
	// poll timer did. A worker whose claim filled a whole batch claims
	// again at once, without waiting, and is not counted.
	Woken(outbox string, byNotify bool)

	// Published is called once for every row whose publish got a
	// verdict: confirmed, nacked, returned, timed out or lost with the
	// channel.
	Published(outbox string, p Publication)

	// Dead is called when n rows became dead, after that is committed:
	// their attempts were spent, or their event cannot be published.
	Dead(outbox string, n int)

	// OutboxStats is called every Config.StatsInterval with a snapshot
	// of the whole table (all relays' rows).
	OutboxStats(outbox string, s outbox.Stats)
}

// BlockObserver is implemented by an Observer that also wants to know
// when the broker blocks the relay's connection (a memory or disk alarm)
// and when it unblocks it. The relay calls these methods when its
// Observer implements them; it is an interface of its own so that
// Observers written before it keep compiling.
type BlockObserver interface {
	// Blocked is called when the broker blocks the connection; reason
	// is the broker's ("low on memory", "low on disk space").
	Blocked(outbox, reason string)
	// Unblocked is called when the block ends: the broker lifted it, or
	// the connection it applied to is gone.
	Unblocked(outbox string)
}

// Publication is the verdict on one row's publish.
type Publication struct {
	// InsertedAt is when the producer's transaction wrote the row
	// (Postgres's transaction time, on the database's clock).
	InsertedAt time.Time
	// Took is the time from handing the message to the broker to its
	// verdict. The CDC relay reads a batch's verdicts after those of the
	// batches before it, so its Took also holds their retries' waits.
	Took time.Duration
	// Err is nil when the broker confirmed the message and did not return
	// it as unroutable.
	Err error
}

// DefaultStatsInterval is Config.StatsInterval's default.
const DefaultStatsInterval = 15 * time.Second
