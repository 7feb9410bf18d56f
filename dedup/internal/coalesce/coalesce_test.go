package coalesce

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/internal/testenv"
)

// call is a test item: send doubles in and records the batch it was in.
type call struct {
	in, out int
	batch   int // number of the batch that answered it, from 1
}

// recorder is a Send that answers calls and records every batch. While
// gate is set, each send first waits for a value from it.
type recorder struct {
	mu       sync.Mutex
	batches  [][]int // the in values of each batch, in send order
	inFlight atomic.Int64
	maxSeen  atomic.Int64
	gate     chan struct{}
	started  chan struct{} // receives once per send, when gated
}

func (r *recorder) send(ctx context.Context, calls []*call) {
	n := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for {
		m := r.maxSeen.Load()
		if n <= m || r.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if r.gate != nil {
		r.started <- struct{}{}
		<-r.gate
	}
	r.mu.Lock()
	ins := make([]int, len(calls))
	for i, c := range calls {
		ins[i] = c.in
	}
	r.batches = append(r.batches, ins)
	number := len(r.batches)
	r.mu.Unlock()
	for _, c := range calls {
		c.out, c.batch = 2*c.in, number
	}
}

func gated() *recorder {
	return &recorder{gate: make(chan struct{}), started: make(chan struct{}, 100)}
}

// doAsync starts a call and returns a channel that receives Do's error.
func doAsync(b *Batcher[*call], ctx context.Context, c *call) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- b.Do(ctx, c) }()
	return errc
}

func waitQueued(t *testing.T, b *Batcher[*call], n int) {
	t.Helper()
	testenv.WaitFor(t, 60*time.Second, "calls to queue up", func() bool { return b.Waiting() == n })
}

// A call made while nothing is in flight goes out at once, alone: an idle
// store answers as fast as it would without batching.
func TestAloneGoesOutAtOnce(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	b := New(8, 1, r.send)
	c := &call{in: 21}
	if err := b.Do(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if c.out != 42 || len(r.batches) != 1 || len(r.batches[0]) != 1 {
		t.Fatalf("answer %d, batches %v; want 42 in one batch of one", c.out, r.batches)
	}
}

// Calls that arrive while a batch is in flight wait and go out together in
// the next one, in arrival order, and each gets its own answer.
func TestCallsMadeDuringASendShareTheNextBatch(t *testing.T) {
	t.Parallel()
	r := gated()
	b := New(8, 1, r.send)
	ctx := context.Background()
	first := &call{in: 0}
	firstErr := doAsync(b, ctx, first)
	<-r.started // the first batch is in flight

	calls := make([]*call, 5)
	errs := make([]<-chan error, 5)
	for i := range calls {
		calls[i] = &call{in: i + 1}
		errs[i] = doAsync(b, ctx, calls[i])
		waitQueued(t, b, i+1) // one at a time, so the order is known
	}
	r.gate <- struct{}{} // answer the first batch
	<-r.started
	r.gate <- struct{}{} // and the second
	for i, errc := range append([]<-chan error{firstErr}, errs...) {
		if err := <-errc; err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if want := [][]int{{0}, {1, 2, 3, 4, 5}}; !equalBatches(r.batches, want) {
		t.Fatalf("batches %v, want %v", r.batches, want)
	}
	for _, c := range calls {
		if c.out != 2*c.in || c.batch != 2 {
			t.Errorf("call %d answered %d in batch %d, want %d in batch 2", c.in, c.out, c.batch, 2*c.in)
		}
	}
}

// No batch carries more than MaxBatch calls; the rest go in the next.
func TestBatchesHoldAtMostMaxBatch(t *testing.T) {
	t.Parallel()
	r := gated()
	b := New(3, 1, r.send)
	ctx := context.Background()
	errs := []<-chan error{doAsync(b, ctx, &call{in: 0})}
	<-r.started
	for i := 1; i <= 7; i++ {
		errs = append(errs, doAsync(b, ctx, &call{in: i}))
		waitQueued(t, b, i)
	}
	go func() {
		for range r.started {
			r.gate <- struct{}{}
		}
	}()
	r.gate <- struct{}{}
	for _, errc := range errs {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	close(r.started)
	if want := [][]int{{0}, {1, 2, 3}, {4, 5, 6}, {7}}; !equalBatches(r.batches, want) {
		t.Fatalf("batches %v, want %v", r.batches, want)
	}
}

// A caller whose context ends while it waits in the queue is taken out of
// it: its call is never sent, and Do says why it returned.
func TestCancelledWhileQueuedIsNotSent(t *testing.T) {
	t.Parallel()
	r := gated()
	b := New(8, 1, r.send)
	firstErr := doAsync(b, context.Background(), &call{in: 0})
	<-r.started
	ctx, cancel := context.WithCancel(context.Background())
	cancelledErr := doAsync(b, ctx, &call{in: 1})
	waitQueued(t, b, 1)
	keptErr := doAsync(b, context.Background(), &call{in: 2})
	waitQueued(t, b, 2)
	cancel()
	if err := <-cancelledErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call returned %v, want context.Canceled", err)
	}
	waitQueued(t, b, 1)
	r.gate <- struct{}{}
	<-r.started
	r.gate <- struct{}{}
	if err := errors.Join(<-firstErr, <-keptErr); err != nil {
		t.Fatal(err)
	}
	if want := [][]int{{0}, {2}}; !equalBatches(r.batches, want) {
		t.Fatalf("batches %v, want %v (the cancelled call must not be sent)", r.batches, want)
	}
}

// A context that is already done fails the call before it is queued.
func TestDoneContextFailsAtOnce(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	b := New(8, 1, r.send)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Do(ctx, &call{in: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	if len(r.batches) != 0 {
		t.Fatalf("sent %v", r.batches)
	}
}

// The batch's context ends only when every one of its callers has given
// up: one caller's cancellation must not fail the calls of the others.
func TestBatchContextOutlivesAllButTheLastCaller(t *testing.T) {
	t.Parallel()
	inFlight, gate := make(chan struct{}, 1), make(chan struct{})
	sendCtx, release := make(chan context.Context, 1), make(chan struct{})
	b := New(8, 1, func(ctx context.Context, calls []*call) {
		if calls[0].in == 0 { // the first batch holds the others back
			inFlight <- struct{}{}
			<-gate
			return
		}
		sendCtx <- ctx
		<-release
	})
	first := doAsync(b, context.Background(), &call{in: 0})
	<-inFlight
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	errA := doAsync(b, ctxA, &call{in: 1})
	waitQueued(t, b, 1)
	errB := doAsync(b, ctxB, &call{in: 2})
	waitQueued(t, b, 2)
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	ctx := <-sendCtx // the batch of calls 1 and 2, in flight
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the batch's context ended when one of its two callers gave up")
	}
	cancelB()
	<-errB
	select {
	case <-ctx.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the batch's context did not end after every caller gave up")
	}
	close(release)
}

// A caller that gives up while its call is in flight never reads the
// answer: the batcher hands it to Abandoned once the batch is answered, so
// the store can undo it (a claim's lease). A caller answered in time is
// not abandoned, even if its context ends afterwards.
func TestAnswerOfCallerWhoGaveUpGoesToAbandoned(t *testing.T) {
	t.Parallel()
	r := gated()
	b := New(8, 1, r.send)
	abandoned := make(chan []*call, 1)
	b.Abandoned = func(items []*call) { abandoned <- items }
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	gone, stays := &call{in: 1}, &call{in: 2}
	errA := doAsync(b, ctxA, gone)
	<-r.started // gone's batch is in flight
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller who gave up: %v", err)
	}
	r.gate <- struct{}{}
	select {
	case items := <-abandoned:
		if len(items) != 1 || items[0] != gone || gone.out != 2 {
			t.Fatalf("abandoned %v, want the answered call of the caller who gave up", items)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer nobody received was not handed to Abandoned")
	}
	errB := doAsync(b, ctxB, stays)
	<-r.started
	r.gate <- struct{}{}
	if err := <-errB; err != nil || stays.out != 4 {
		t.Fatalf("caller answered in time: %v, answer %d", err, stays.out)
	}
	cancelB()
	select {
	case items := <-abandoned:
		t.Fatalf("abandoned %v, which its caller received", items)
	default:
	}
}

// A send that panics fails its batch's calls with an error, and the
// batcher goes on sending the calls behind them.
func TestPanickingSendFailsItsBatch(t *testing.T) {
	t.Parallel()
	inFlight, gate := make(chan struct{}, 1), make(chan struct{})
	b := New(8, 1, func(ctx context.Context, calls []*call) {
		if calls[0].in == 0 {
			inFlight <- struct{}{}
			<-gate
			panic("send failed")
		}
		for _, c := range calls {
			c.out = 2 * c.in
		}
	})
	first := doAsync(b, context.Background(), &call{in: 0})
	<-inFlight
	next := &call{in: 1}
	behind := doAsync(b, context.Background(), next)
	waitQueued(t, b, 1)
	close(gate)
	if err := <-first; err == nil || !strings.Contains(err.Error(), "send failed") {
		t.Fatalf("call of the panicking batch returned %v, want an error carrying the panic", err)
	}
	if err := <-behind; err != nil || next.out != 2 {
		t.Fatalf("call behind the panicking batch: %v, answer %d", err, next.out)
	}
}

// Under many concurrent callers, some of whom give up, every call that
// returns nil was answered exactly once, batches stay within their
// limits, and no caller is left waiting.
func TestConcurrentCallersUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		callers     = 64
		perCaller   = 200
		maxBatch    = 16
		maxInFlight = 3
	)
	var answered sync.Map // in -> times answered
	var tooBig atomic.Int64
	var inFlight, peak atomic.Int64
	b := New(maxBatch, maxInFlight, func(ctx context.Context, calls []*call) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
		}
		if len(calls) > maxBatch {
			tooBig.Add(1)
		}
		for _, c := range calls {
			v, _ := answered.LoadOrStore(c.in, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			c.out = 2 * c.in
		}
	})
	var wg sync.WaitGroup
	var succeeded atomic.Int64
	for g := range callers {
		wg.Go(func() {
			for i := range perCaller {
				c := &call{in: g*perCaller + i}
				ctx, cancel := context.WithCancel(context.Background())
				switch rand.IntN(10) {
				case 0:
					cancel() // gives up before calling
				case 1: // gives up while queued or in flight, or not at all
					cancel()
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(300))*time.Microsecond)
				}
				err := b.Do(ctx, c)
				cancel()
				if err == nil {
					succeeded.Add(1)
					if c.out != 2*c.in {
						t.Errorf("call %d returned nil with answer %d", c.in, c.out)
					}
				}
			}
		})
	}
	wg.Wait()
	answered.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n != 1 {
			t.Errorf("call %v answered %d times", k, n)
		}
		return true
	})
	if tooBig.Load() > 0 || peak.Load() > maxInFlight {
		t.Errorf("%d batches over %d calls; up to %d in flight, limit %d", tooBig.Load(), maxBatch, peak.Load(), maxInFlight)
	}
	if succeeded.Load() == 0 {
		t.Fatal("no call succeeded")
	}
	if b.Waiting() != 0 {
		t.Fatalf("%d calls left in the queue", b.Waiting())
	}
	// Every batch slot's goroutine ends once the queue is empty.
	testenv.WaitFor(t, 60*time.Second, "the batch slots to stop", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inFlight == 0
	})
}

func equalBatches(got, want [][]int) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			return false
		}
		for j := range got[i] {
			if got[i][j] != want[i][j] {
				return false
			}
		}
	}
	return true
}

// Configure fills the store's defaults into the zero fields and refuses
// negative sizes and a MaxBatch above the store's bound.
func TestConfigure(t *testing.T) {
	t.Parallel()
	def := dedup.Batching{MaxBatch: 128, MaxBatchesInFlight: 2}
	got, err := Configure("dedup/test", dedup.Batching{MaxBatchesInFlight: 5}, def, 1024)
	if want := (dedup.Batching{MaxBatch: 128, MaxBatchesInFlight: 5}); err != nil || got != want {
		t.Errorf("Configure = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []dedup.Batching{{MaxBatch: -1}, {MaxBatchesInFlight: -1}, {MaxBatch: 1025}} {
		if _, err := Configure("dedup/test", bad, def, 1024); err == nil || !strings.HasPrefix(err.Error(), "dedup/test: ") {
			t.Errorf("Configure(%+v) = %v, want an error naming the store", bad, err)
		}
	}
	if _, err := Configure("dedup/test", dedup.Batching{MaxBatch: 5000}, def, 0); err != nil {
		t.Errorf("Configure with no limit refused MaxBatch 5000: %v", err)
	}
	if NewFor(dedup.Batching{MaxBatch: 1}, func(context.Context, []*call) {}) != nil {
		t.Error("NewFor made a batcher for MaxBatch 1 (batching off)")
	}
}
