// Package relay is warren's transactional outbox on Postgres: the write
// side that records an event in the producer's own transaction, the relay
// that moves recorded events to a RabbitMQ fanout exchange, and the
// operations that inspect, redrive and trim the table.
//
// # Writing
//
// A producer writes its business change and the event in one transaction:
//
//	tx, _ := pool.Begin(ctx)
//	// ... INSERT/UPDATE the business rows on tx ...
//	relay.Publish(ctx, tx, ev) // takes a pgx.Tx, never a pool
//	tx.Commit(ctx)
//
// One commit decides both. A NOTIFY rides in the same transaction, so a
// running relay hears of the event the moment it commits, and never of one
// that rolled back. event_id is unique in the table; publishing an event
// twice stores it once.
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
//     is dead, visible to [Outbox.Dead] and "warren outbox dead", until
//     [Outbox.Redrive] gives it another round. A publish that certainly
//     never reached the broker (its channel closed first, or no in-flight
//     slot freed up in time) puts the row back at once, its attempt not
//     counted.
//
// Consumers must therefore be idempotent on event_id; warren's dedup
// middleware is.
//
// A stop returns within PublishTimeout plus a few seconds whatever the
// broker does: a broker that stops reading the connection (a memory or
// disk alarm) gets 5s to answer the publisher's close before the
// connection is closed under it; the rows it never confirmed stay in the
// table.
//
// Several relays may run on one table. LISTEN/NOTIFY wakes them within
// milliseconds of a commit; the adaptive poll (PollMin to PollMax) remains
// the source of truth, since notifications are lost while a listener
// reconnects and retries that fall due send none. A notification wakes
// one idle claim loop, not all of them.
//
// The relay's own transactions (claims and settles) commit with
// synchronous_commit off, in that transaction only: a crash of the
// database can forget one, which makes its rows published again, never
// lost. It spares the disk two flushes per wake-up that the producers'
// commits would queue behind. The producers' transactions keep their own
// setting, even on a pool shared with the relay.
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
// [Outbox.Migrate] creates and upgrades the table from embedded, versioned
// migrations. [Outbox.Stats] reports depth, age, in-flight and dead
// counts; [Outbox.Redrive] revives dead rows; [Outbox.Purge] trims finished
// rows in batches and never deletes a batch its archive hook failed to
// keep.
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
// ctx given to Publish is stored with the row and sent as a traceparent
// header, so a handler's span joins the producer's trace.
package relay
