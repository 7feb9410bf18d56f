package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/cdc"
)

// The CDC scenarios (issue 18) put the relay that streams the outbox from
// a logical replication slot (package relay/cdc) beside the polling relay
// and the raw loop: how fast it drains a backlog, how soon a committed
// event is published, and what running it costs the producers. Their
// names start with "cdc", so that `-run cdc` selects them alone.

// cdcLatencyRate is the rate of the CDC latency scenario: issue 18's.
const cdcLatencyRate = 1000

// cdcLogger shows the CDC relays' warnings and errors: a relay that
// cannot stream retries quietly, and a bench waiting on it would
// otherwise only say that it waited.
var cdcLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func cdcScenarios() []scenario {
	return []scenario{cdcRelayScenario(), cdcLatencyScenario(), cdcProducersScenario()}
}

func cdcRelayScenario() scenario {
	return scenario{
		name: "cdc relay",
		about: "The relay scenario's backlog of -messages outbox rows (written by outbox.PublishBatch, 1,000 to a transaction) moved to a " +
			"fanout exchange with publisher confirms, by the relay scenario's raw loop (the baseline), by `relay.Run` at its defaults " +
			"(shown for comparison, judged in the relay scenario) and by the CDC relay (package relay/cdc) at its defaults. For the CDC " +
			"relay the backlog is in the slot's stream, as it is when producers write while the relay runs: a first relay makes the " +
			"publication and the slot on the empty table and records that nothing needs a backfill, and is stopped; then the rows are " +
			"written, and the clock runs from a second relay's start until it has had every row confirmed by the broker and the table " +
			"is empty (every row trimmed), as the polling relays' clock runs until no row is pending. The CDC relay claims nothing: it " +
			"decodes the rows from the stream, publishes them in batches of up to 500, up to 4 batches ahead of their confirms, and " +
			"deletes each confirmed batch with one statement while the next ones are published. A second reference publishes the " +
			"same messages, encoded before its clock starts, the way the CDC relay publishes, with nothing read from Postgres or " +
			"written to it: the broker's own ceiling on this machine, which bounds every relay. Each measurement has its own table " +
			"and slot, dropped after it.",
		metrics: []metric{{name: throughput.name, target: target{ratio: 1.6}}},
		variants: []variant{
			{name: "raw: claim 500, publish, confirm, delete", baseline: true, run: rawRelay},
			{name: "reference: relay.Run defaults", reference: true, run: warrenRelay(nil)},
			{name: "reference: the broker's ceiling, the same messages published from memory", reference: true, run: brokerCeiling},
			{name: "warren: CDC relay defaults", run: cdcDrain,
				why: "the broker's own ceiling (its reference row) is not far above the target on these two cores, and the CDC relay " +
					"shares them with the work that replaces the claim: the walsender decoding every insert from the WAL, the relay " +
					"decoding the stream and encoding each event (about 30 µs of CPU an event in a profile of this drain), and the " +
					"trims. Publishing is no longer the wait: batches go out ahead of their confirms. Compare the ceiling row: what " +
					"separates the relay from it is that CPU, which the ceiling's publisher, reading nothing, does not spend."},
		},
	}
}

func cdcLatencyScenario() scenario {
	rate := cdcLatencyRate
	return scenario{
		name: fmt.Sprintf("cdc commit → publish latency, %d events/s", rate),
		about: fmt.Sprintf("The commit → publish latency scenario's workload (%d producers committing one event per transaction with "+
			"`outbox.Publish` on a steady schedule of %d events/s, a consumer noting each event's arrival, the first %v not counted) "+
			"with the CDC relay at its defaults: it streams the inserts from the slot, so it needs no NOTIFY and no poll, and an "+
			"event's latency is the walsender's decoding, the relay's batch and the broker's confirm. The relay makes its slot before "+
			"the producers start. Producers are unchanged by the CDC relay, so they still send outbox.Publish's NOTIFY, which nobody "+
			"listens to, unless the outbox is opened with `NotifyNever` (the configuration for a table only CDC relays drain; `NoNotify` in the variants): both are "+
			"measured. The references run the producers alone, with no relay, with each option. Committed events/s says whether the producers kept their schedule.",
			producers, rate, latencyWarmUp),
		metrics: latencyMetrics(rate, 2, 20),
		size:    latencySize(rate),
		variants: []variant{
			{name: "reference: producers alone, NOTIFY in every transaction", reference: true, run: measureLatency(rate, nil, outbox.Options{Notify: outbox.NotifyEveryCommit})},
			{name: "reference: producers alone, NoNotify", reference: true, run: measureLatency(rate, nil, outbox.Options{Notify: outbox.NotifyNever})},
			{name: "warren: CDC relay, NOTIFY in every transaction", run: measureLatency(rate, runCDCRelay, outbox.Options{Notify: outbox.NotifyEveryCommit}),
				why: "its producers still send outbox.Publish's NOTIFY in every transaction, which nobody listens to, and Postgres " +
					"commits notifying transactions one WAL flush at a time: compare the producers alone, who may miss the schedule on " +
					"this machine with no relay at all. " + cdcLatencyWhy},
			{name: "warren: CDC relay, NoNotify", run: measureLatency(rate, runCDCRelay, outbox.Options{Notify: outbox.NotifyNever}),
				why: cdcLatencyWhy},
		},
	}
}

// cdcLatencyWhy is the CDC relay's share of a latency miss.
const cdcLatencyWhy = "Then an event waits for the walsender to decode its commit, for one query that its transaction is visible, " +
	"and for its confirm (a persistent message on a durable queue; batches go out ahead of the confirms of the ones before); on 2 " +
	"cores shared by the producers, Postgres (its walsender among them), RabbitMQ and the relay, the scheduler's delays add to each " +
	"of those waits, and most to the tail."

func cdcProducersScenario() scenario {
	return scenario{
		name: "cdc producers",
		about: fmt.Sprintf("What a relay costs the producers: %d producers commit one event per transaction with `outbox.Publish` "+
			"(opened with `NoNotify`, as for a table only CDC relays drain, for every variant alike; relay.Run then finds rows by its poll) as fast as they can for -latency-duration, "+
			"the first %v not counted, with no relay (the baseline), with the CDC relay streaming the table (made and ready before "+
			"the producers start), and with `relay.Run` at its defaults polling it. The last variant is option 1 of "+
			"docs/adr/020-cdc-relay.md, with no relay: each producer deletes its row in the transaction that wrote it (the insert stays "+
			"in the WAL for a stream to read), which is what that option would cost every producer. The relays' work (the "+
			"walsender's decoding and the trims for CDC; the claims and deletes for relay.Run) shares the machine, Postgres's WAL "+
			"and its locks with the producers.", producers, latencyWarmUp),
		metrics: []metric{{name: "commits/s", target: target{ratio: 0.95}}},
		size: func(e *env) string {
			return fmt.Sprintf("%d producers for %v", producers, e.latencyRun)
		},
		variants: []variant{
			{name: "baseline: producers alone, no relay", baseline: true, run: measureProducers(nil, publishOnly)},
			{name: "warren: CDC relay running", run: measureProducers(runCDCRelay, publishOnly),
				why: "the producers alone keep both cores about 88% busy (vmstat during the baseline: 8 Go producers and their 8 " +
					"backends), so every relay's work comes out of their share: the walsender decodes every transaction, the relay " +
					"encodes and publishes each event, RabbitMQ takes it (a persistent message costs the broker more CPU than the " +
					"relay), and each batch's trim is a DELETE committed synchronously, one more WAL flush among the producers'. " +
					"relay.Run, publishing the same events after claiming them instead, costs the producers about as much (its " +
					"reference row), so what misses is relaying on the producers' machine, not the stream: 0.95 needs the broker and " +
					"the relay on cores the producers do not use. (The relay's one query a batch, that its transactions are visible, " +
					"is not it: without it the producers made the same rate, 2,468 against 2,428 commits/s in 2 rounds.)"},
			{name: "reference: relay.Run defaults running", reference: true, run: measureProducers(runWarrenRelay(nil), publishOnly)},
			{name: "reference: INSERT then DELETE in the transaction (ADR option 1), no relay", reference: true,
				run: measureProducers(nil, publishThenDelete)},
		},
	}
}

// cdcStateTable is the table the CDC relay keeps beside ob's outbox: per
// slot, whether the rows written before the slot have been published.
func cdcStateTable(ob *outboxBench) string {
	return pgx.Identifier{ob.outbox.Name() + "_cdc"}.Sanitize()
}

// newCDCRelay is the CDC relay at its defaults on ob's table, with a slot
// of the table's own, which ob.close drops.
func newCDCRelay(e *env, ob *outboxBench) (*cdc.Relay, error) {
	ob.slot = ob.outbox.Name() + "_cdc"
	return cdc.New(cdc.Config{Pool: ob.pool, AMQPURL: e.amqpURL, Exchange: ob.exchange, Table: ob.outbox.Name(),
		Slot: ob.slot, Name: "warren-bench-cdc", Logger: cdcLogger})
}

// runningCDC runs r on ob until the returned relay is stopped.
func runningCDC(ctx context.Context, e *env, ob *outboxBench, r *cdc.Relay) (*startedRelay, error) {
	return startRelay(ctx, e, ob, func(ctx context.Context, _ *env, _ *outboxBench, ready func()) error {
		ready()
		return r.Run(ctx)
	})
}

// cdcReady waits until r streams ob's slot and has recorded that its
// backfill is done. From then on every row committed is published from
// the stream alone; a row written earlier could be published twice, by
// the backfill (which reads the table) and from the stream.
func cdcReady(ctx context.Context, ob *outboxBench, rel *startedRelay, r *cdc.Relay) error {
	return pollUntil(ctx, rel, time.Minute, "the CDC relay to stream its slot", func(ctx context.Context) (bool, error) {
		if !r.Streaming() {
			return false, nil
		}
		// The relay makes the state table and its row before it
		// streams.
		var done bool
		err := ob.pool.QueryRow(ctx, `SELECT backfilled_at IS NOT NULL FROM `+cdcStateTable(ob)+` WHERE slot = $1`, ob.slot).Scan(&done)
		return done, err
	})
}

// runCDCRelay is the runRelay of the CDC relay: ready once its slot
// streams, so that producers write after the slot exists.
func runCDCRelay(ctx context.Context, e *env, ob *outboxBench, ready func()) error {
	r, err := newCDCRelay(e, ob)
	if err != nil {
		return err
	}
	rel, err := runningCDC(ctx, e, ob, r)
	if err != nil {
		return err
	}
	defer rel.stop()
	if err := cdcReady(ctx, ob, rel, r); err != nil {
		return err
	}
	ready()
	select {
	case <-ctx.Done():
	case <-rel.done:
	}
	return rel.stop()
}

// brokerCeiling publishes e.messages events, encoded before the clock
// starts, with bare amqp091-go as the CDC relay publishes: batches of
// cdc.DefaultBatchSize, cdc.DefaultBatchesInFlight of them ahead of their
// confirms, on one channel, mandatory, to the same exchange and queue. It
// reads nothing from Postgres and writes nothing to it: what RabbitMQ can
// take on this machine, which bounds every relay.
func brokerCeiling(ctx context.Context, e *env) (figures, error) {
	ob, err := newOutboxBench(ctx, e, 1000)
	if err != nil {
		return nil, err
	}
	defer ob.close()
	// The raw relay loop's connection and confirm-mode channel; its
	// claim is not used.
	raw, err := newRawRelayLoop(ctx, e, ob)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	ch := raw.ch
	msgs := make([]amqp.Publishing, e.messages)
	for i := range msgs {
		ev := e.event(i)
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		msgs[i] = amqp.Publishing{MessageId: ev.ID, Type: ev.Type, ContentType: "application/json", DeliveryMode: amqp.Persistent,
			Timestamp: ev.CreatedAt, Headers: amqp.Table{warren.HeaderInitiatorType: ev.InitiatorType}, Body: body}
	}
	begin := time.Now()
	var window [][]*amqp.DeferredConfirmation
	confirmed := func(batch []*amqp.DeferredConfirmation) error {
		for _, dc := range batch {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("broker nacked a message")
			}
		}
		return nil
	}
	for start := 0; start < len(msgs); start += cdc.DefaultBatchSize {
		var batch []*amqp.DeferredConfirmation
		for _, m := range msgs[start:min(len(msgs), start+cdc.DefaultBatchSize)] {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, ob.exchange, m.Type, true, false, m)
			if err != nil {
				return nil, err
			}
			batch = append(batch, dc)
		}
		if window = append(window, batch); len(window) > cdc.DefaultBatchesInFlight {
			if err := confirmed(window[0]); err != nil {
				return nil, err
			}
			window = window[1:]
		}
	}
	for _, batch := range window {
		if err := confirmed(batch); err != nil {
			return nil, err
		}
	}
	return rate(len(msgs), time.Since(begin)), nil
}

// cdcDrainTimeout bounds a CDC drain: a relay that cannot publish retries
// without end, and the run should fail rather than hang.
const cdcDrainTimeout = 10 * time.Minute

// cdcDrain drains a backlog of e.messages rows with the CDC relay. The
// rows must be in the slot's stream, not read by the first relay's
// backfill: the slot is made on the empty table first.
func cdcDrain(ctx context.Context, e *env) (figures, error) {
	ob, err := newOutboxBench(ctx, e, 1000)
	if err != nil {
		return nil, err
	}
	defer ob.close()
	if err := makeCDCSlot(ctx, e, ob); err != nil {
		return nil, err
	}
	if err := ob.insert(ctx, e.messages, e.event); err != nil {
		return nil, err
	}
	r, err := newCDCRelay(e, ob)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	rel, err := runningCDC(ctx, e, ob, r)
	if err != nil {
		return nil, err
	}
	defer rel.stop() // before ob.close, deferred earlier
	// Counting confirms costs the relay an atomic load; Postgres is asked
	// whether the table is empty only once every row has been confirmed.
	err = pollUntil(ctx, rel, cdcDrainTimeout, "the CDC relay to publish and trim the backlog", func(ctx context.Context) (bool, error) {
		if n := r.Dead(); n > 0 {
			return false, fmt.Errorf("the CDC relay made %d events dead", n)
		}
		if r.Published() < int64(e.messages) {
			return false, nil
		}
		var empty bool
		err := ob.pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM `+ob.table()+`)`).Scan(&empty)
		return empty, err
	})
	elapsed := time.Since(begin)
	if err != nil {
		return nil, err
	}
	if err := rel.stop(); err != nil {
		return nil, err
	}
	return rate(e.messages, elapsed), nil
}

// makeCDCSlot has a CDC relay make ob's publication and slot on the
// empty table and record that nothing needs a backfill, stops it, and
// waits until its walsender has let the slot go: a relay started while
// the slot is held stands by for a second (cdc.DefaultStandbyRetry),
// which would be counted in the measurement.
func makeCDCSlot(ctx context.Context, e *env, ob *outboxBench) error {
	r, err := newCDCRelay(e, ob)
	if err != nil {
		return err
	}
	rel, err := runningCDC(ctx, e, ob, r)
	if err != nil {
		return err
	}
	err = cdcReady(ctx, ob, rel, r)
	if stopErr := rel.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return err
	}
	return pollUntil(ctx, nil, 30*time.Second, "the stopped relay's walsender to release the slot", func(ctx context.Context) (bool, error) {
		s, err := cdc.Status(ctx, ob.pool, ob.outbox.Name(), ob.slot)
		return err == nil && !s.Active, err
	})
}

// dropCDCSlot drops ob's slot, its publication and its state row, trying
// again while the walsender of a relay that just stopped still holds the
// slot. A slot it cannot drop is reported: Postgres would keep WAL for it
// for ever.
func dropCDCSlot(ob *outboxBench) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	err := pollUntil(ctx, nil, 30*time.Second, "the replication slot to be dropped", func(ctx context.Context) (bool, error) {
		last = cdc.DropSlot(ctx, ob.pool, ob.outbox.Name(), ob.slot, ob.slot)
		return last == nil, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: replication slot %s was not dropped (%v, %v); drop it by hand: SELECT pg_drop_replication_slot('%s')\n",
			ob.slot, err, last, ob.slot)
	}
}

// pollUntil checks cond every 5 ms until it holds or fails, for at most
// timeout, and fails early when rel (if not nil) stops.
func pollUntil(ctx context.Context, rel *startedRelay, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	var stopped <-chan struct{}
	if rel != nil {
		stopped = rel.done
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %s", timeout, what)
		}
		select {
		case <-stopped:
			return fmt.Errorf("relay stopped while waiting for %s: %v", what, rel.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// producerWrite is what one producer's transaction writes for ev.
type producerWrite func(ctx context.Context, tx pgx.Tx, ob *outboxBench, ev warren.Event) error

func publishOnly(ctx context.Context, tx pgx.Tx, ob *outboxBench, ev warren.Event) error {
	_, err := ob.outbox.Publish(ctx, tx, ev)
	return err
}

// publishThenDelete is option 1 of docs/adr/020-cdc-relay.md: the producer
// deletes its row in the transaction that wrote it, and only the WAL
// keeps the insert.
func publishThenDelete(ctx context.Context, tx pgx.Tx, ob *outboxBench, ev warren.Event) error {
	if err := publishOnly(ctx, tx, ob, ev); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM `+ob.table()+` WHERE event_id = $1`, ev.ID)
	return err
}

// measureProducers measures the producers' commits per second while run
// relays the table (no relay when run is nil). A relay must have moved
// rows by the end, or it was not running and the figure says nothing.
func measureProducers(run runRelay, write producerWrite) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		ob, err := latencyOutbox(ctx, e, outbox.Options{Notify: outbox.NotifyNever})
		if err != nil {
			return nil, err
		}
		defer ob.close()
		var rel *startedRelay
		if run != nil {
			if rel, err = startRelay(ctx, e, ob, run); err != nil {
				return nil, err
			}
			defer rel.stop() // before ob.close, deferred earlier
		}
		perSecond, total, err := produceFlatOut(ctx, e, ob, write)
		if err != nil {
			return nil, err
		}
		if rel == nil {
			return figures{perSecond}, nil
		}
		if err := rel.stop(); err != nil {
			return nil, err
		}
		var left int
		if err := ob.pool.QueryRow(ctx, `SELECT count(*) FROM `+ob.table()).Scan(&left); err != nil {
			return nil, err
		}
		if left >= total {
			return nil, fmt.Errorf("the relay moved none of the %d events committed", total)
		}
		return figures{perSecond}, nil
	}
}

// produceFlatOut commits one event per transaction from the producers'
// goroutines for e.latencyRun, each starting its next transaction as soon
// as its last one committed. It returns the commits per second after the
// first latencyWarmUp (connections opening, a relay settling into the
// load) and how many events were committed in all.
func produceFlatOut(ctx context.Context, e *env, ob *outboxBench, write producerWrite) (float64, int, error) {
	var next, counted atomic.Int64
	start := time.Now()
	warm, end := start.Add(min(latencyWarmUp, e.latencyRun/2)), start.Add(e.latencyRun)
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				ev := e.event(int(next.Add(1) - 1))
				err := pgx.BeginFunc(ctx, ob.pool, func(tx pgx.Tx) error { return write(ctx, tx, ob, ev) })
				if err != nil {
					errs <- err
					return
				}
				if time.Now().After(warm) {
					counted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(warm)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return float64(counted.Load()) / elapsed.Seconds(), int(next.Load()), ctx.Err()
}
