package dedup

import (
	"context"
	"errors"
	"time"

	"github.com/warrenmq/warren"
)

// ErrRefused marks an error a store answered a call with that belongs to
// the call itself — its key, its data — rather than to the store's state:
// the store is up, other calls succeed, and this one would fail again (a
// key the database's constraints refuse, a Redis key holding another type
// of value). Stores mark such errors with [Refused]; errors.Is(err,
// ErrRefused) finds them.
//
// A caller treats a refused call as a failure of its message, which is
// retried and, failing every time, dead-lettered, so that one poisonous key
// cannot hold its message forever. Every other error — a timeout, a lost
// connection, a store that answered that it cannot serve anyone now (a
// restart, too many connections, a read-only replica) — is the store's: the
// message waits for the store without spending attempts.
var ErrRefused = errors.New("dedup: the store refused the call")

// Refused marks err, which the store answered a call with, as the call's
// own (see [ErrRefused]). The result's text is err's; errors.Is and
// errors.As find both err's chain and ErrRefused.
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return refusedError{err}
}

type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{e.err, ErrRefused} }

// Bounded returns a Store that passes every call to store within timeout
// and tells health (when not nil) how each went, for the readiness of a
// consumer that lists health in consumer.Config.Dependencies:
//
//   - An answer — a result, [ErrLeaseLost], a [Refused] error — reports the
//     store up.
//   - Any other error, a timeout among them, reports it down; a claim that
//     failed because the caller's own context ended (a shutdown) reports
//     nothing, as it says nothing about the store.
//
// Complete and Release run on a context that the caller's cancellation
// does not reach (still bounded by timeout): a handler cancelled by a
// timeout or a shutdown must still free its key, or its retry waits out
// the lease.
//
// When store implements [Transactor], so does the returned Store: WithinTx
// reports the store's own result (the transaction's begin, mark and
// commit), never fn's error. WithinTx is not bounded by timeout, as fn runs
// inside it; the store bounds its own statements (dedup/postgres's
// Config.CallTimeout).
//
// Bounded panics if store is nil or timeout is not positive.
func Bounded(store Store, timeout time.Duration, health *warren.Dependency) Store {
	if store == nil {
		panic("dedup: Bounded: nil store")
	}
	if timeout <= 0 {
		panic("dedup: Bounded: timeout must be positive")
	}
	b := &bounded{store: store, timeout: timeout, health: health}
	if tx, ok := store.(Transactor); ok {
		return &boundedTx{bounded: b, tx: tx}
	}
	return b
}

type bounded struct {
	store   Store
	timeout time.Duration
	health  *warren.Dependency
}

func (b *bounded) Claim(ctx context.Context, key string, lease time.Duration) (Claim, error) {
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	c, err := b.store.Claim(cctx, key, lease)
	if ctx.Err() == nil {
		b.report(err)
	}
	return c, err
}

func (b *bounded) Complete(ctx context.Context, c Claim) error {
	return b.settle(ctx, c, b.store.Complete)
}

func (b *bounded) Release(ctx context.Context, c Claim) error {
	return b.settle(ctx, c, b.store.Release)
}

func (b *bounded) settle(ctx context.Context, c Claim, op func(context.Context, Claim) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	err := op(sctx, c)
	b.report(err)
	return err
}

// report tells health how a call went: an answer, whatever it was, means
// the store is up.
func (b *bounded) report(err error) {
	if b.health == nil {
		return
	}
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRefused) {
		err = nil
	}
	b.health.Report(err)
}

type boundedTx struct {
	*bounded
	tx Transactor
}

func (b *boundedTx) WithinTx(ctx context.Context, c Claim, fn func(ctx context.Context) error) error {
	ran := false
	var fnErr error
	err := b.tx.WithinTx(ctx, c, func(ctx context.Context) error {
		ran = true
		fnErr = fn(ctx)
		return fnErr
	})
	switch {
	case ran && fnErr != nil:
		// fn failed and the transaction rolled back: fn's error says
		// nothing about the store.
	case !ran && ctx.Err() != nil:
		// The caller's own context ended before the transaction began.
	default:
		b.report(err)
	}
	return err
}
