package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
)

// The growth scenarios (issue 17, part 3) measure how throughput and the
// tail of latency change as one dimension of the work grows: the
// consumer's workers, the payload, the relays on one table, the outbox's
// backlog. Each point of a dimension is a scenario of its own with one raw
// and one warren variant, so the harness interleaves them and gives each
// point its ratio; the report draws a dimension's points as one chart and
// one table ("How cost grows") instead of a section per point.

// growthRounds caps the rounds of every growth point: 14 points of two
// variants each would take most of an hour at the harness's default of 5.
const growthRounds = 3

// growthDimension is one axis along which the work grows.
type growthDimension struct {
	name  string // the chart's file is growth-<name>.png
	title string // the report's heading and the chart's title
	axis  string // the x axis
	about string // the workload, and what grows with the dimension on each side
	// logY draws the rates on a log scale: they span orders of magnitude
	// along the dimension.
	logY bool
}

// growthPoint is where a scenario sits on its dimension's chart.
type growthPoint struct {
	dim  *growthDimension
	work string // the kind of work, where a dimension has several ("consume", "relay"); "" otherwise
	x    string // the point's label on the x axis, e.g. "16" or "4 KiB"
}

// growthScenario is one point: raw and warren doing the same work.
func growthScenario(p growthPoint, metrics []metric, size func(*env) string, raw, warren variant) scenario {
	name := "growth: " + p.dim.name + " " + p.x
	if p.work != "" {
		name += ", " + p.work
	}
	raw.baseline = true
	return scenario{name: name, about: p.dim.about, metrics: metrics, size: size, rounds: growthRounds,
		growth: &p, variants: []variant{raw, warren}}
}

// runFunc is a variant's measurement.
type runFunc = func(ctx context.Context, e *env) (figures, error)

// joinRuns measures runs one after the other and returns their figures
// in order: a scenario whose metrics come from different workloads.
func joinRuns(runs ...runFunc) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		var all figures
		for _, run := range runs {
			f, err := run(ctx, e)
			if err != nil {
				return nil, err
			}
			all = append(all, f...)
		}
		return all, nil
	}
}

func growthScenarios() []scenario {
	var out []scenario
	out = append(out, workerScenarios()...)
	out = append(out, payloadScenarios()...)
	out = append(out, relayCountScenarios()...)
	return append(out, backlogScenarios()...)
}

var workersDim = &growthDimension{
	name: "workers", title: "Consumer workers", axis: "workers (raw: channels)",
	about: fmt.Sprintf("A no-op handler as the handlers run at once grow. warren is a BaseConsumer at its defaults (%d channels, prefetch %d "+
		"each: %d messages in flight, enough to keep 64 workers fed) with Workers set to the point; raw is the ack-multiple shape "+
		"(each channel's goroutine handles its deliveries in order and acks every 100 with multiple) with as many channels as warren has "+
		"workers, prefetch %d each. msg/s drains a backlog of -messages events, as the consume scenario does. p99 is a second "+
		"workload on the same shape: %d events published at a steady %d/s (well under either side's capacity) while the consumer runs, "+
		"and the latency of one is from the publisher's call to publish it to its handler starting (raw: to the delivery's arrival at "+
		"its channel's goroutine, where the handler would run), leaving out the first %d. What grows with the workers is "+
		"warren's hand-off from its channels to the worker pool and the scheduler's share of goroutines; the broker's work does not.",
		consumer.DefaultChannels, prefetch, consumer.DefaultChannels*prefetch, prefetch, pacedMessages, pacedRate, pacedWarmUp),
}

func workerScenarios() []scenario {
	metrics := []metric{throughput, {name: "p99 ms", lowerBetter: true}}
	size := func(e *env) string {
		return fmt.Sprintf("%d messages drained, then %d published at %d/s", e.messages, pacedMessages, pacedRate)
	}
	var out []scenario
	for _, n := range []int{1, 4, 16, 64} {
		withWorkers := func(c *consumer.Config) { c.Workers = n }
		out = append(out, growthScenario(growthPoint{dim: workersDim, x: fmt.Sprint(n)}, metrics, size,
			variant{name: fmt.Sprintf("raw: %d channels, ack multiple every 100", n), run: joinRuns(rawConsume(n, 100, nil), rawPaced(n))},
			variant{name: fmt.Sprintf("warren: BaseConsumer, %d workers", n), run: joinRuns(warrenConsume(withWorkers), warrenPaced(withWorkers))}))
	}
	return out
}

// payloadBudget bounds the bytes of message bodies one payload
// measurement moves: -messages events of 64 KiB would put 1.3 GB through
// the broker and the outbox per measurement, and minutes per round. A
// point's rate is steady well before that: about 1,000 events of 64 KiB
// take a second or two to drain.
const payloadBudget = 64 << 20

var payloadDim = &growthDimension{
	name: "payload", title: "Payload size", axis: "payload.data", logY: true,
	about: fmt.Sprintf("The consume and relay scenarios' workloads with each event's payload.data padded to the point's size "+
		"(base64 of pseudo-random bytes, so that neither Postgres's TOAST compression nor anything else shrinks it). "+
		"Consume: raw is 16 channels acking multiple every 100, warren a BaseConsumer at its defaults. Relay: the relay scenario's raw "+
		"loop and `relay.Run` at its defaults. One measurement moves -messages events, or as many as fit in %d MiB of bodies "+
		"(about 1,000 at 64 KiB, 15,000 at 4 KiB); MB/s counts message bodies (10^6 bytes). What grows with the payload is copying: warren decodes "+
		"each event it consumes and, relaying, reads the payload from jsonb and encodes the envelope in Go, where the raw "+
		"consumer never looks at the body and the raw relay has Postgres build it.", payloadBudget>>20),
}

func payloadScenarios() []scenario {
	metrics := []metric{throughput, {name: "MB/s"}}
	var out []scenario
	for _, s := range []struct {
		label string
		bytes int
	}{{"300 B", 300}, {"4 KiB", 4 << 10}, {"64 KiB", 64 << 10}} {
		size := func(e *env) string {
			g := withPayload(e, s.bytes)
			return fmt.Sprintf("%d events of %d bytes", g.messages, bodySize(g))
		}
		out = append(out,
			growthScenario(growthPoint{dim: payloadDim, work: "consume", x: s.label}, metrics, size,
				variant{name: "raw: 16 channels, ack multiple every 100", run: payloadRun(s.bytes, rawConsume(16, 100, nil))},
				variant{name: "warren: BaseConsumer defaults", run: payloadRun(s.bytes, warrenConsume(nil))}),
			growthScenario(growthPoint{dim: payloadDim, work: "relay", x: s.label}, metrics, size,
				variant{name: "raw: claim 500, publish, confirm, delete", run: payloadRun(s.bytes, rawRelay)},
				variant{name: "warren: relay.Run defaults", run: payloadRun(s.bytes, warrenRelay(nil))}))
	}
	return out
}

// payloadRun measures run on events whose payload.data is n bytes, and
// adds the rate in MB/s of message bodies.
func payloadRun(n int, run runFunc) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		g := withPayload(e, n)
		f, err := run(ctx, g)
		if err != nil {
			return nil, err
		}
		return append(f, f[0]*float64(bodySize(g))/1e6), nil
	}
}

// withPayload is a copy of e whose events carry n bytes of payload.data,
// and as many of them as payloadBudget allows.
func withPayload(e *env, n int) *env {
	g := *e
	g.payloadData = paddedData(n)
	g.messages = max(1, min(e.messages, payloadBudget/bodySize(&g)))
	return &g
}

// bodySize is the size of e's events as the broker carries them.
func bodySize(e *env) int {
	body, err := e.event(0).MarshalJSON()
	if err != nil {
		panic(err) // sampleEvent encodes, and padding keeps its data valid JSON
	}
	return len(body)
}

// event is the i-th event of e's workloads: sampleEvent(i), with
// payload.data replaced where e says.
func (e *env) event(i int) warren.Event {
	ev := sampleEvent(i)
	if e.payloadData != nil {
		ev.Payload.Data = e.payloadData
	}
	return ev
}

// paddedData is sampleEvent's payload.data with a "padding" field that
// makes it n bytes long (at least the unpadded object's).
func paddedData(n int) []byte {
	const head, tail = `{"state":"done","priority":"high","padding":"`, `"}`
	pad := max(n-len(head)-len(tail), 0)
	// Pseudo-random bytes from a fixed seed: the same on every run, and
	// as incompressible as a payload of real data, or more.
	raw := make([]byte, base64.RawStdEncoding.DecodedLen(pad)+3)
	r := rand.New(rand.NewPCG(17, 3))
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	return []byte(head + base64.RawStdEncoding.EncodeToString(raw)[:pad] + tail)
}
