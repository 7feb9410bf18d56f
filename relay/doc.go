// Package relay is the process of warren's transactional outbox: it moves
// the events that producers recorded with [outbox.Publish] from the
// outbox table to a RabbitMQ fanout exchange. Writing events and operating
// the table (migrate, stats, dead rows, redrive, purge) are package
// outbox; a producer links only that, and no AMQP client.
//
// # Relaying
//
// [New] and [Relay.Run] run a relay in process; "warren relay run" runs
// the same relay as a sidecar. Each worker loop claims a batch of due rows
// with FOR UPDATE SKIP LOCKED and commits the claim at once, leaving a
// lease in the row's available_at; publishes the whole batch with
// publisher confirms and mandatory routing; and settles the batch in one
// round trip, fenced on the row's claim counter. The guarantee is at least
// once:
//
//   - A row is deleted (or marked delivered) only after the broker
//     confirmed its message and did not return it as unroutable.
//   - A relay that dies holding rows leaves them leased; when the lease
//     lapses another relay claims them. A relay that stalls past its lease
//     cannot overwrite what the next claimant decided.
//   - A failed publish (nack, return, timeout, lost connection) puts the row
//     back with an exponential, jittered delay; after MaxAttempts claims it
//     is dead, visible to [outbox.Table.Dead] and "warren outbox dead", until
//     [outbox.Table.Redrive] gives it another round. A publish that certainly
//     never reached the broker (its channel closed first, or no in-flight
//     slot freed up in time) puts the row back at once, its attempt not
//     counted.
//   - A broker session whose publishes to one destination (exchange and
//     routing key) keep being nacked for 5s, none of them confirmed, is
//     ended and dialled again: RabbitMQ keeps refusing a quorum queue on a
//     channel that first published to it while the node leading it had
//     just died, until that node is back, and a new channel is served at
//     once. The refusal is per channel and queue, so confirms for other
//     destinations do not hide it. The streak forms when two of the
//     destination's nacks come within 5s of each other, and then lasts
//     whatever the gaps between its retries, until its own confirm: a
//     refused event's first retries come within a second or two, so a
//     quiet relay renews a stuck channel too. One nack followed by silence
//     ends nothing: a quiet relay with one event a queue refuses on purpose
//     keeps its session between the event's retries once they are more
//     than 5s apart, and after one renewal that does not help, forms no
//     streak again while they stay so (amqpx.NackStreak).
//   - RabbitMQ nacks a publish that any one queue bound to the exchange
//     refused, having delivered it to the others: a refusing queue beside
//     a healthy one makes every attempt a copy in the healthy queue, and
//     the row ends dead though its consumers had it. The dead row's error
//     says the event may have reached other queues; redrive it knowing
//     that the healthy queues' consumers will see it again (they
//     deduplicate on event_id).
//
// Consumers must therefore be idempotent on event_id; warren's dedup
// middleware is.
//
// A stop returns within PublishTimeout plus a few seconds whatever the
// broker does: a broker that stops reading the connection (a memory or
// disk alarm) gets 5s to answer the publisher's close before the
// connection is closed under it; the rows it never confirmed stay in the
// table. An Observer method that blocks is the exception: the stop waits
// for it (see [Observer]).
//
// A slow or stopped consumer need not fill the broker: with
// Config.HoldBack the relay reads its consumers' queues every second and
// claims nothing while one of them is at its high-water mark, so the
// backlog waits in the outbox, on Postgres's disk, until the queue drains
// (docs/adr/028-backpressure.md). Every consumer of the exchange waits with
// the slowest, and nothing is retried or duplicated.
//
// Several relays may run on one table. LISTEN/NOTIFY wakes them within
// milliseconds of a commit; the adaptive poll (PollMin to PollMax) remains
// the source of truth, since notifications are lost while a listener
// reconnects and retries that fall due send none. A notification wakes
// one idle claim loop, not all of them.
//
// Every producer's NOTIFY has a price: Postgres commits notifying
// transactions one WAL flush at a time. So producers notify only when no
// other row is due (outbox.NotifyWhenIdle, their default), and a relay
// that claimed rows looks again after PollMin (default 2ms): that poll,
// not a notification, finds what was committed meanwhile.
//
// The relay's own transactions (claims and settles) commit with
// synchronous_commit off, in that transaction only: a crash of the
// database can forget one, which makes its rows published again, never
// lost. It spares the disk two flushes per wake-up that the producers'
// commits would queue behind. The producers' transactions keep their own
// setting, even on a pool shared with the relay.
//
// # Plane's own outbox table
//
// Config.Schema outbox.SchemaPlane ("warren relay run --schema plane")
// drains Plane's outbox table where it is, without a migration, beside
// Plane's triggers, poller and cleaner, so the two can run together during
// a cut-over:
//
//   - The claim is Plane's: unclaimed, unprocessed rows in id order with
//     FOR UPDATE SKIP LOCKED, on Plane's partial index, setting claimed_at.
//     A claimed_at older than the Lease is a lapsed claim (Plane's crashed
//     poller leaves them for ever) and is taken over. Looking for lapsed
//     claims scans the table, so a relay does it at most every Lease/2, and
//     at once again while it finds a full batch of them.
//   - A confirmed row gets processed_at, so Plane's cleaner keeps deleting
//     processed rows after its cutoff; the relay deletes nothing
//     (KeepDelivered is implied). Every settle is fenced on the claimed_at
//     its claim set (in microseconds, as a token): a relay whose lease lapsed
//     cannot settle rows taken over since.
//   - A failed publish puts the row back as a claim that lapses when its
//     retry delay ends (claimed_at = now() - Lease + delay), which keeps
//     Plane's poller off it too; it is retried by the next takeover. A
//     graceful stop releases its claims (claimed_at = NULL), which Plane's
//     poller may then take.
//   - Without warren's optional columns a row has no attempt count and
//     cannot be dead: a row that can never be published (too large, not
//     decodable) is retried every RetryMax and logged at Error each time,
//     and the relay says so at start. "warren outbox migrate --schema
//     plane" adds them (additive, unnoticed by Plane's code): attempts
//     count toward MaxAttempts, the last error is kept, a row out of
//     attempts or unpublishable gets warren_dead_at (its claimed_at stays
//     set, so Plane's poller never takes it either), lapsed claims are
//     found on an index at every claim, and "warren outbox dead" and
//     "redrive" work.
//
// Plane's consumers read Config.Format warren.FormatPlane, whose
// outbox_id is the row's id; the schema does not choose the format. With
// timestamp (not timestamptz) columns, the relay's and Plane's sessions
// must share a TimeZone (both follow the server's unless set), since the
// lease is measured against now(). OrderByEntity is not supported there.
//
// # Ordering
//
// By default rows are claimed in (available_at, id) order but published
// concurrently, and a failed row is retried behind later ones, so there is
// no ordering guarantee. Config.OrderByEntity publishes each entity's
// events in outbox order by making only the entity's oldest pending row
// claimable, at the price of head-of-line blocking within the entity: a
// row that keeps failing holds back its entity's later events until it is
// delivered or dead. A dead row no longer holds them back (one poison event
// must not stop an entity forever), so a redriven row arrives after them.
// Outbox order is insert order; producers that change one entity from
// concurrent transactions should lock the entity's row before Publish, so
// that inserts happen in commit order.
//
// # Operating
//
// The relay does not migrate: [Relay.Run] refuses a table that is missing
// or at another schema version (on a Plane table: missing, or without
// Plane's columns), and [outbox.Table.Migrate] creates or upgrades it. The table's
// operations ([outbox.Table.Stats], Dead, Redrive, Purge) are package
// outbox's.
//
// # Seeing what happens
//
// [Relay.HealthHandler] serves /healthz (workers are looping) and /readyz
// (broker connected and not blocking the connection, last claim
// succeeded). While a broker alarm blocks the connection the relay claims
// nothing and rows keep their attempts. Config.Observer receives every
// publish verdict, wake-up and dead row, plus periodic outbox stats, and,
// if it implements [BlockObserver], each block and unblock
// (package warrenprom/relayprom turns them into Prometheus metrics), and
// Config.TracerProvider records a span per publish. The trace context of the
// ctx given to outbox.Publish is stored with the row and sent as a traceparent
// header, so a handler's span joins the producer's trace.
//
// An event whose properties and headers, with the row's trace context,
// would exceed amqpx.MaxContentHeader (a 200 KB entity_id, initiator_type
// or tracestate written by SQL) is dead at its first claim: published,
// its content header would pass frame_max, and the broker would close
// the connection at every attempt.
//
// # Policy
//
// What each verdict costs a row; package relay/cdc's documentation has the
// CDC relay's table, with the same rows, and docs/adr/027-relay-policies.md
// says why the two differ where they do.
//
//	confirmed                     row deleted (or kept delivered) in the settle
//	returned unroutable           an attempt; retried after its delay
//	nacked                        an attempt; retried after its delay
//	no confirm, channel lost      an attempt; retried after its delay
//	not sent, broker blocked      the attempt given back
//	not encodable                 dead at its claim
//	MaxAttempts (20)              claims, paced by RetryMin 1s doubling to RetryMax 10m, jittered
//
// # What would still break it
//
//   - A channel refused after an election while no two nacks of one
//     destination come within 5s of each other (RetryMin above 5s, or a
//     stuck channel met only by events already RetryMax into their
//     retries): no streak forms, the session is kept, and the events go on
//     being refused until the old leader's node is back or the connection
//     drops for another reason.
//   - A queue that refuses on purpose (reject-publish at its length limit)
//     while the relay publishes to it steadily: the session ends every 5s,
//     a reconnect each time (other destinations' publishes in flight are
//     sent again), and the rows wait for their retries either way.
//   - More than 256 destinations nacked in one session: the streaks of
//     those nacked longest ago are forgotten.
//   - A refusing queue beside a healthy one on the exchange: one copy in
//     the healthy queue per attempt, and a dead row for a delivered event
//     (see above); the nack does not say which queue refused.
//   - A row's tracestate is checked as stored, though with a
//     TracerProvider the span may carry a shorter one: a row whose raw
//     tracestate is over the limit is dead even then.
//   - A row the broker refuses by closing the connection for a reason the
//     relay does not measure first (a broker frame_max below 128 KiB, a
//     max_message_size below MaxMessageBytes) costs a reconnect at each
//     claim until its attempts are spent.
package relay
