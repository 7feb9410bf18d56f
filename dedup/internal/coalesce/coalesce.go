package coalesce

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/dedup"
)

// Send answers one batch: it must set the answer of every item (the items
// carry their own answer fields) before it returns. Its context carries
// the values of the batch's first caller and ends only when every caller
// of the batch has given up, so that one caller's cancellation does not
// fail the others' calls.
type Send[T any] func(ctx context.Context, items []T)

// Batcher coalesces calls into batches of at most maxBatch items, with at
// most maxInFlight batches in flight. It is safe for concurrent use.
type Batcher[T any] struct {
	// Abandoned, when set (before the first Do), is called with the items
	// of a batch whose callers gave up while the batch was in flight, once
	// the batch has been answered: each item then carries an answer that
	// nobody received, or an error that left its fate unknown. The store
	// undoes what needs undoing (a claim's lease) with it. It runs on the
	// batch's slot, before the slot takes another batch, and must bound
	// its own I/O.
	Abandoned func(items []T)

	send        Send[T]
	maxBatch    int
	maxInFlight int

	mu       sync.Mutex
	queue    []*waiter[T] // calls not yet taken into a batch, oldest first
	inFlight int          // batch slots at work
}

type waiter[T any] struct {
	item  T
	ctx   context.Context
	done  chan struct{} // closed once the batch holding item has been answered
	err   error         // set before done is closed when send panicked
	taken bool          // item is in a batch; guarded by Batcher.mu
	// abandoned: the caller returned while item was in flight, and will
	// never read its answer; guarded by Batcher.mu, as is the closing of
	// done, so that each answer is either received or abandoned.
	abandoned bool
}

// New returns a batcher that answers batches with send. maxBatch and
// maxInFlight below 1 count as 1; maxBatch 1 turns batching off.
func New[T any](maxBatch, maxInFlight int, send Send[T]) *Batcher[T] {
	return &Batcher[T]{send: send, maxBatch: max(maxBatch, 1), maxInFlight: max(maxInFlight, 1)}
}

// Configure fills cfg's zero fields from def and checks it: no field may be
// negative, nor MaxBatch above limit (0: no limit). The error names the
// store (its package, e.g. "dedup/redis"). The stores call it from New.
func Configure(store string, cfg, def dedup.Batching, limit int) (dedup.Batching, error) {
	if cfg.MaxBatch < 0 || cfg.MaxBatchesInFlight < 0 {
		return cfg, fmt.Errorf("%s: negative MaxBatch (%d) or MaxBatchesInFlight (%d)", store, cfg.MaxBatch, cfg.MaxBatchesInFlight)
	}
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, def.MaxBatch)
	cfg.MaxBatchesInFlight = cmp.Or(cfg.MaxBatchesInFlight, def.MaxBatchesInFlight)
	if limit > 0 && cfg.MaxBatch > limit {
		return cfg, fmt.Errorf("%s: MaxBatch %d is above %d", store, cfg.MaxBatch, limit)
	}
	return cfg, nil
}

// NewFor returns the batcher cfg (filled by Configure) asks for, or nil
// when cfg.MaxBatch is 1: batching is off and each call goes out alone.
func NewFor[T any](cfg dedup.Batching, send Send[T]) *Batcher[T] {
	if cfg.MaxBatch <= 1 {
		return nil
	}
	return New(cfg.MaxBatch, cfg.MaxBatchesInFlight, send)
}

// Do adds item to the next batch and returns once the batch has been
// answered, or with ctx's error once ctx ends. After an error the item may
// still be in a batch in flight, whose send writes its answer later: the
// caller must not read the item then, and must treat the call like a
// request whose reply was lost (it may or may not have taken effect);
// the batcher hands such an item, once answered, to Abandoned. A send that
// panics fails every call of its batch with an error.
func (b *Batcher[T]) Do(ctx context.Context, item T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := &waiter[T]{item: item, ctx: ctx, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, w)
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		go b.flush()
	}
	b.mu.Unlock()

	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		if !w.taken {
			b.remove(w)
			return ctx.Err()
		}
		select {
		case <-w.done:
			return w.err // answered after all
		default:
			w.abandoned = true // run hands the answer to Abandoned
			return ctx.Err()
		}
	}
}

// flush is one batch slot at work: it sends batches from the head of the
// queue until the queue is empty.
func (b *Batcher[T]) flush() {
	for {
		// Yield before taking a batch: the callers that the previous batch
		// (this slot's or another's) just woke are runnable and about to
		// call again. Letting them queue first makes one batch of what
		// would be a batch of one and a batch of the rest, for the price of
		// a pass of the scheduler rather than a timer's delay.
		runtime.Gosched()
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		batch := b.take()
		b.mu.Unlock()
		b.run(batch)
	}
}

// take removes the next batch from the queue. b.mu must be held.
func (b *Batcher[T]) take() []*waiter[T] {
	n := min(len(b.queue), b.maxBatch)
	batch := slices.Clone(b.queue[:n])
	for _, w := range batch {
		w.taken = true
	}
	// Shift the rest down rather than reslice, so the queue's array does
	// not grow without bound under steady load.
	b.queue = slices.Delete(b.queue, 0, n)
	return batch
}

// remove drops w, which has not been taken, from the queue. b.mu must be
// held.
func (b *Batcher[T]) remove(w *waiter[T]) {
	if i := slices.Index(b.queue, w); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
}

// Waiting returns how many calls are queued for a batch, not yet sent.
func (b *Batcher[T]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// run answers one batch and wakes its callers.
func (b *Batcher[T]) run(batch []*waiter[T]) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	var gaveUp atomic.Int64
	stops := make([]func() bool, len(batch))
	items := make([]T, len(batch))
	for i, w := range batch {
		items[i] = w.item
		stops[i] = context.AfterFunc(w.ctx, func() {
			if gaveUp.Add(1) == int64(len(batch)) {
				cancel()
			}
		})
	}
	err := b.sendSafely(ctx, items)
	for _, stop := range stops {
		stop()
	}
	cancel()
	var abandoned []T
	b.mu.Lock()
	for _, w := range batch {
		w.err = err
		if w.abandoned {
			abandoned = append(abandoned, w.item)
		}
		close(w.done)
	}
	b.mu.Unlock()
	if len(abandoned) > 0 && b.Abandoned != nil {
		_ = safely(func() { b.Abandoned(abandoned) }) // a panic there loses only the undoing
	}
}

// sendSafely sends a batch. A panic in send is a bug in the store; it
// fails this batch's calls rather than the process, whose other work may
// be sound.
func (b *Batcher[T]) sendSafely(ctx context.Context, items []T) error {
	if err := safely(func() { b.send(ctx, items) }); err != nil {
		return fmt.Errorf("coalesce: sending a batch of %d: %w", len(items), err)
	}
	return nil
}

func safely(f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	f()
	return nil
}

// UndoTimeout bounds the batch that [Undo]'s function sends; it holds the
// batch slot, so it is short.
const UndoTimeout = 5 * time.Second

// Undo returns a function for [Batcher.Abandoned] that sends, as one batch
// bounded by UndoTimeout, the undoing of the abandoned items that need it:
// undo returns, for an item, the item that undoes it (a release of the
// lease a claim took, fenced by the claim's token so that undoing a claim
// that took nothing changes nothing) and whether there is one. The
// answers of the undoing items are not read: what they could not undo
// (the store away) runs out by itself with its lease.
func Undo[T any](send Send[T], undo func(T) (T, bool)) func(items []T) {
	return func(items []T) {
		var undos []T
		for _, it := range items {
			if u, ok := undo(it); ok {
				undos = append(undos, u)
			}
		}
		if len(undos) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), UndoTimeout)
		defer cancel()
		send(ctx, undos)
	}
}
