package middleware

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup"
)

// DedupOptions configures [Dedup]. The zero value is ready to use.
type DedupOptions struct {
	// Lease is how long a claim keeps other workers off an event. It must
	// be longer than the handler can run — bound the handler with [Timeout]
	// below Dedup, shorter than Lease — or a slow handler's event can be
	// taken over and handled twice. It is also how long an event waits
	// when the process that claimed it dies. Default 5 minutes.
	Lease time.Duration

	// BusyDelay is how long a message waits before it comes back when
	// another worker holds its event's lease. The wait does not spend an
	// attempt. Default 5 seconds.
	BusyDelay time.Duration

	// Key derives a message's dedup key. A message for which it returns ""
	// fails permanently. Default: Consumer + ":" + event_id ([DefaultKey]),
	// so each consumer handles an event once, independently of the others.
	Key func(m *warren.Message) string

	// Transactional runs the handler inside the store's transaction
	// ([dedup.Transactor]) so its database writes and the done-mark commit
	// together: a handler's database effects then happen exactly once,
	// even when the process dies between the commit and the ack. The store
	// must implement dedup.Transactor; handlers get the transaction from
	// the store's package (postgres.Tx(ctx)). Default false.
	Transactional bool

	// FailOpen runs the handler without deduplication when the store
	// cannot be asked, trading possible duplicates for availability.
	// Default false: the message is deferred for UnavailableDelay
	// ([warren.Unavailable]), without spending an attempt, and comes back
	// until the store answers, so no event is handled unclaimed.
	FailOpen bool

	// StoreTimeout bounds each call to the store (a claim, a completion, a
	// release), so that a stalled store — a database whose backends stopped
	// answering, a connection nobody reads — holds a worker no longer than
	// this. A claim that times out is a store failure like any other. In
	// Transactional mode the store bounds its transaction's own statements
	// (dedup/postgres's Config.CallTimeout). Default 10 seconds.
	StoreTimeout time.Duration

	// UnavailableDelay is how long a message waits before it comes back
	// when its claim failed because the store could not be reached or did
	// not answer in time, so its handler did not run. The wait does not spend an attempt, however many times
	// it recurs, so a store outage longer than every retry tier together
	// dead-letters nothing; the consumer rounds it up to a retry tier.
	// Default 10 seconds.
	UnavailableDelay time.Duration

	// Health, when set, is told the result of every store call
	// ([dedup.Bounded]), so a consumer that lists it in
	// consumer.Config.Dependencies shows the store down in its health (and
	// is not ready) while calls fail or time out. Its lapse
	// ([warren.Dependency.SetLapse], a minute by default) must be longer
	// than UnavailableDelay rounded up to a retry tier. Default nil: no
	// report.
	Health *warren.Dependency

	// Logger receives what an outcome cannot carry: a lease lost under a
	// slow handler, a done-mark that could not be written, a store error
	// passed over in FailOpen mode, redacted (internal/redact): the
	// store's error may quote its connection string. Default slog.Default().
	Logger *slog.Logger
}

// Default values of [DedupOptions].
const (
	DefaultLease            = 5 * time.Minute
	DefaultBusyDelay        = 5 * time.Second
	DefaultStoreTimeout     = 10 * time.Second
	DefaultUnavailableDelay = 10 * time.Second
)

// DefaultKey is the key [Dedup] uses unless told otherwise:
// dedup.Key(consumer, event_id), "<consumer>:<event_id>" with ':' in the
// consumer's name escaped, or "" when either is missing.
func DefaultKey(m *warren.Message) string {
	if m.Consumer == "" || m.Event.ID == "" {
		return ""
	}
	return dedup.Key(m.Consumer, m.Event.ID)
}

// Dedup lets each event through to the handlers below it once per key: it
// claims the message's key in store with a lease, runs the handler when the
// claim is acquired, and then marks the key done (the message is
// acknowledged: done, skipped or duplicate) or releases it (a retry, a
// deferral or a dead letter follows, and the next delivery must run the
// handler). Other outcomes are errors the consumer understands:
//
//   - key already done: [warren.Duplicate], acknowledged and counted.
//   - key busy under another worker's lease: [warren.Defer] for
//     opts.BusyDelay, which does not spend an attempt.
//   - store unreachable or not answering in time on the claim (or on the
//     begin of its transaction): [warren.Unavailable] for
//     opts.UnavailableDelay, which does not spend an attempt (the handler
//     has not run), unless opts.FailOpen.
//   - claim refused by the store for its key ([dedup.ErrRefused]): a
//     transient error, retried and, failing every time, dead-lettered as
//     exhausted, so that one poisonous key cannot hold its message (and
//     the consumer's readiness) forever. FailOpen does not apply: the store
//     was asked, and answered.
//
// The handler's own error is returned unchanged.
//
// Dedup panics if store is nil, if a duration in opts is negative, or if
// opts.Transactional is set and store does not implement dedup.Transactor.
func Dedup(store dedup.Store, opts DedupOptions) warren.Middleware {
	if store == nil {
		panic("middleware: Dedup: nil store")
	}
	d := &deduper{opts: opts, log: redacting(opts.Logger)}
	if opts.Lease < 0 || opts.BusyDelay < 0 || opts.StoreTimeout < 0 || opts.UnavailableDelay < 0 {
		panic(fmt.Sprintf("middleware: Dedup: negative duration (Lease %v, BusyDelay %v, StoreTimeout %v, UnavailableDelay %v)",
			opts.Lease, opts.BusyDelay, opts.StoreTimeout, opts.UnavailableDelay))
	}
	if _, ok := store.(dedup.Transactor); opts.Transactional && !ok {
		panic(fmt.Sprintf("middleware: Dedup: Transactional needs a store that implements dedup.Transactor; %T does not", store))
	}
	d.opts.Lease = cmp.Or(d.opts.Lease, DefaultLease)
	d.opts.BusyDelay = cmp.Or(d.opts.BusyDelay, DefaultBusyDelay)
	d.opts.StoreTimeout = cmp.Or(d.opts.StoreTimeout, DefaultStoreTimeout)
	d.opts.UnavailableDelay = cmp.Or(d.opts.UnavailableDelay, DefaultUnavailableDelay)
	if d.opts.Key == nil {
		d.opts.Key = DefaultKey
	}
	d.store = dedup.Bounded(store, d.opts.StoreTimeout, d.opts.Health)
	if opts.Transactional {
		d.tx = d.store.(dedup.Transactor) // Bounded keeps it
	}
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			return d.handle(ctx, m, next)
		})
	}
}

type deduper struct {
	store dedup.Store      // dedup.Bounded: every call bounded and reported
	tx    dedup.Transactor // store's, non-nil in transactional mode
	opts  DedupOptions
	log   func() *slog.Logger
}

func (d *deduper) handle(ctx context.Context, m *warren.Message, next warren.Handler) error {
	key := d.opts.Key(m)
	if key == "" {
		return warren.Permanent(fmt.Errorf("dedup: no key for event %q of consumer %q (the default key needs both)", m.Event.ID, m.Consumer))
	}
	// A claim that times out inside a store's batch may still take effect
	// after the caller has gone; the stores give such a lease back
	// (docs/adr/016-dedup-batching.md), and at worst it runs out by itself
	// after Lease.
	claim, err := d.store.Claim(ctx, key, d.opts.Lease)
	if err != nil {
		if errors.Is(err, dedup.ErrRefused) {
			// The store answered: the failure is this message's key, and
			// would recur on every delivery. Spending attempts lets the
			// message reach the DLQ rather than wait for ever.
			return fmt.Errorf("dedup: %w", err)
		}
		if d.opts.FailOpen && ctx.Err() == nil {
			d.logStoreError(ctx, slog.LevelWarn, "dedup store failed; handling the event without deduplication (FailOpen)", m, key, err)
			return next.Handle(ctx, m)
		}
		// The handler has not run: the failure is the store's, not the
		// message's, and must not spend an attempt — or a store outage
		// longer than the retry tiers would dead-letter, as exhausted,
		// messages nothing ever tried. (A shutdown that cancelled ctx is
		// requeued by the consumer whatever the outcome.)
		return warren.Unavailable(d.opts.UnavailableDelay, fmt.Errorf("dedup: %w", err)) // the store's error names the key
	}
	switch claim.Result {
	case dedup.Acquired:
	case dedup.Done:
		return warren.Duplicate(fmt.Sprintf("event %s already handled (key %q)", m.Event.ID, key))
	case dedup.Busy:
		return warren.Defer(d.opts.BusyDelay, fmt.Sprintf("event %s is being handled by another worker (key %q)", m.Event.ID, key))
	default:
		return fmt.Errorf("dedup: claim %q: store answered %v", key, claim.Result)
	}

	settled := false
	defer func() {
		// The handler panicked. Recover, above, turns the panic into a
		// retry, which must find the key free rather than wait out the lease.
		if !settled {
			d.release(ctx, m, claim)
		}
	}()
	if d.tx != nil {
		err = d.handleInTx(ctx, m, next, claim)
		settled = true
		return err
	}
	err = next.Handle(ctx, m)
	settled = true
	if !acknowledged(err) {
		d.release(ctx, m, claim)
		return err
	}
	if cerr := d.store.Complete(ctx, claim); cerr != nil {
		// The handler succeeded but the done-mark is not written. Returning
		// an error would retry the message and so run the handler again for
		// certain; acknowledging it runs the handler again only if the event
		// is delivered again.
		if errors.Is(cerr, dedup.ErrLeaseLost) {
			// The lease ran out before the handler finished and another
			// claimer took the key over: the event may be handled twice. What remains guaranteed is that it is not lost: the key's
			// new holder completes or releases it on its own.
			d.logStoreError(ctx, slog.LevelWarn, "dedup lease expired before the handler finished; the event may be handled twice (make Lease longer than the handler's Timeout)", m, key, cerr)
		} else {
			// The lease still holds the key until it expires, so immediate
			// redeliveries are held off; a redelivery after that runs again.
			d.logStoreError(ctx, slog.LevelError, "event handled but its done-mark was not written; a later redelivery may handle it again", m, key, cerr)
		}
	}
	return err
}

// handleInTx runs the handler in the store's transaction, which commits the
// done-mark with the handler's writes when the message is to be
// acknowledged, and rolls both back otherwise.
func (d *deduper) handleInTx(ctx context.Context, m *warren.Message, next warren.Handler, claim dedup.Claim) error {
	var handlerErr error
	ran := false
	err := d.tx.WithinTx(ctx, claim, func(ctx context.Context) error {
		ran = true
		handlerErr = next.Handle(ctx, m)
		if acknowledged(handlerErr) {
			return nil
		}
		return handlerErr
	})
	switch {
	case err == nil:
		return handlerErr
	case !ran && errors.Is(err, dedup.ErrRefused):
		d.release(ctx, m, claim)
		return fmt.Errorf("dedup: %w", err)
	case !ran:
		// The transaction did not begin: the store failed before the
		// handler ran, which must not spend an attempt, as for a claim.
		d.release(ctx, m, claim)
		return warren.Unavailable(d.opts.UnavailableDelay, fmt.Errorf("dedup: %w", err))
	case !acknowledged(handlerErr):
		d.release(ctx, m, claim)
		return handlerErr
	case errors.Is(err, dedup.ErrLeaseLost):
		// The key was taken over while the handler ran, and the handler's
		// writes were rolled back with the mark. The new holder handles the
		// event; this delivery's retry finds the key done (or still busy).
		return fmt.Errorf("dedup: handler's transaction rolled back: %w", err)
	default:
		// The commit failed and may or may not have happened. Release is
		// fenced by the token and leaves a committed done-mark alone, so
		// the retry finds the key done if it committed and free if not.
		d.release(ctx, m, claim)
		return fmt.Errorf("dedup: %w", err)
	}
}

// acknowledged reports whether err leads the consumer to ack the message,
// after which no delivery of it follows and the key should be done.
func acknowledged(err error) bool {
	switch outcome, _ := warren.Classify(err); outcome {
	case warren.OutcomeDone, warren.OutcomeSkipped, warren.OutcomeDuplicate:
		return true
	}
	return false
}

func (d *deduper) release(ctx context.Context, m *warren.Message, c dedup.Claim) {
	if err := d.store.Release(ctx, c); err != nil {
		// The retry waits for the lease to expire (deferred as busy
		// meanwhile) instead of running at once. Nothing is lost.
		d.logStoreError(ctx, slog.LevelWarn, "dedup release failed; the retry waits for the lease to expire", m, c.Key, err)
	}
}

func (d *deduper) logStoreError(ctx context.Context, level slog.Level, msg string, m *warren.Message, key string, err error) {
	d.log().LogAttrs(ctx, level, msg,
		slog.String("event_id", m.Event.ID),
		slog.String("consumer", m.Consumer),
		slog.String("dedup_key", key),
		slog.String("error", err.Error()))
}
