package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

func TestPaddedPayload(t *testing.T) {
	plain := bodySize(&env{})
	for _, n := range []int{300, 4 << 10, 64 << 10} {
		data := paddedData(n)
		if len(data) != n || !json.Valid(data) {
			t.Fatalf("paddedData(%d) is %d bytes, valid JSON %v", n, len(data), json.Valid(data))
		}
		e := withPayload(&env{messages: 20000}, n)
		if got := bodySize(e); got <= n || got > n+plain {
			t.Errorf("a %d-byte payload.data makes a %d-byte body; want more than %d and at most %d (the plain envelope's %d on top)", n, got, n, n+plain, plain)
		}
		if want := min(20000, payloadBudget/bodySize(e)); e.messages != want {
			t.Errorf("%d bytes: %d messages, want %d (the budget's share, at most -messages)", n, e.messages, want)
		}
		if ev := e.event(7); ev.ID != sampleEvent(7).ID || string(ev.Payload.Data) != string(data) {
			t.Errorf("event 7 of a padded env is %q with %d bytes of data; want sampleEvent(7)'s id and the padding", ev.ID, len(ev.Payload.Data))
		}
	}
	if e := withPayload(&env{messages: 20000}, 300); e.messages != 20000 {
		t.Errorf("300 bytes: %d messages; small events keep -messages", e.messages)
	}
}

func TestJoinRuns(t *testing.T) {
	one := func(x float64) runFunc {
		return func(context.Context, *env) (figures, error) { return figures{x}, nil }
	}
	f, err := joinRuns(one(1), one(2))(context.Background(), &env{})
	if err != nil || !reflect.DeepEqual(f, figures{1, 2}) {
		t.Fatalf("joinRuns = %v, %v; want [1 2]", f, err)
	}
	boom := errors.New("boom")
	fail := func(context.Context, *env) (figures, error) { return nil, boom }
	if _, err := joinRuns(one(1), fail)(context.Background(), &env{}); !errors.Is(err, boom) {
		t.Fatalf("joinRuns with a failing run = %v; want its error", err)
	}
}

// growthResults are two dimensions' points: workers with two metrics, one
// point run with -variant leaving out warren; payload with two kinds of
// work.
func growthResults() []result {
	two := []metric{throughput, {name: "p99 ms", lowerBetter: true}}
	point := func(dim *growthDimension, work, x string, metrics []metric, variants []variant, samples ...[]figures) result {
		s := growthScenario(growthPoint{dim: dim, work: work, x: x}, metrics, nil, variants[0], variants[1])
		s.variants = s.variants[:len(samples)]
		return resultOf(s, samples...)
	}
	sides := []variant{{name: "raw"}, {name: "warren"}}
	return []result{
		point(workersDim, "", "1", two, sides, []figures{{100, 5}, {120, 4}, {110, 6}}, []figures{{90, 7}, {95, 9}, {99, 8}}),
		resultOf(consumeScenario(), rates(1), rates(1), rates(1), rates(1), rates(1), rates(1), rates(1), rates(1)),
		point(workersDim, "", "4", two, sides, []figures{{200, 3}}),
		point(payloadDim, "consume", "300 B", nil, sides, rates(1000), rates(800)),
		point(payloadDim, "relay", "300 B", nil, sides, rates(500), rates(450)),
		point(payloadDim, "consume", "64 KiB", nil, sides, rates(100), rates(50)),
	}
}

// A dimension's chart has its points in run order and a line per side
// (and kind of work): raw is the best baseline's median, warren its
// variant's median, NaN where a side did not run.
func TestGrowthCharts(t *testing.T) {
	charts := growthCharts(growthResults())
	if len(charts) != 2 || charts[0].dim != workersDim || charts[1].dim != payloadDim {
		t.Fatalf("charts = %+v; want workers then payload, and nothing of the consume scenario", charts)
	}
	workers := charts[0]
	if !reflect.DeepEqual(workers.xs, []string{"1", "4"}) || len(workers.lines) != 2 {
		t.Fatalf("workers: xs %v, %d lines; want 1 and 4, raw and warren", workers.xs, len(workers.lines))
	}
	raw, warren := workers.lines[0], workers.lines[1]
	if raw.label != "raw" || warren.label != "warren" || raw.warren || !warren.warren {
		t.Fatalf("workers lines %q, %q; want raw, warren", raw.label, warren.label)
	}
	if raw.values[0][0] != 110 || raw.values[1][0] != 5 || raw.values[0][1] != 200 || raw.values[1][1] != 3 {
		t.Errorf("raw values %v; want medians 110 and 5 at 1 worker, 200 and 3 at 4", raw.values)
	}
	if warren.values[0][0] != 95 || warren.values[1][0] != 8 || !math.IsNaN(warren.values[0][1]) || !math.IsNaN(warren.values[1][1]) {
		t.Errorf("warren values %v; want medians 95 and 8 at 1 worker, none at 4", warren.values)
	}

	payload := charts[1]
	var labels []string
	for _, l := range payload.lines {
		labels = append(labels, l.label)
	}
	if want := []string{"consume: raw", "consume: warren", "relay: raw", "relay: warren"}; !reflect.DeepEqual(labels, want) {
		t.Fatalf("payload lines %v; want %v", labels, want)
	}
	relay := payload.lines[3]
	if !reflect.DeepEqual(payload.xs, []string{"300 B", "64 KiB"}) || relay.values[0][0] != 450 || !math.IsNaN(relay.values[0][1]) {
		t.Errorf("payload xs %v, relay warren %v; want 450 at 300 B and nothing at 64 KiB", payload.xs, relay.values)
	}
	if consume := payload.lines[1]; consume.values[0][1] != 50 {
		t.Errorf("consume warren at 64 KiB = %v, want 50", consume.values[0][1])
	}
}

// Growth points are reported in "How cost grows" with their ratios, not
// as sections of their own nor as bars of ratios.png, and each dimension
// gets its PNG.
func TestGrowthReportAndCharts(t *testing.T) {
	results := growthResults()
	out := renderReport(results, runInfo{command: "go run . -run growth", rounds: 3})
	for _, want := range []string{
		"## How cost grows",
		"![Consumer workers](growth-workers.png)",
		"| workers (raw: channels) | raw msg/s | warren msg/s | warren ÷ raw | raw p99 ms | warren p99 ms | warren ÷ raw (lower is better) | one measurement | rounds |",
		"| 1 | 110 (100 – 120) | 95.0 (90.0 – 99.0) | 0.86 | 5.0 (4.0 – 6.0) | 8.0 (7.0 – 9.0) | 1.60 | test | 3 |",
		"| 4 | 200 (200 – 200) | – | – | 3.0 (3.0 – 3.0) | – | – | test | 1 |",
		"| 300 B | relay | 500 (500 – 500) | 450 (450 – 450) | 0.90 | test | 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "## growth:") {
		t.Error("a growth point has a section of its own")
	}
	for _, b := range ratioBars(results) {
		if strings.HasPrefix(b.label, "growth:") {
			t.Errorf("ratios.png has a growth bar: %+v", b)
		}
	}

	dir := t.TempDir()
	if err := writeGrowthCharts(dir, results); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"growth-workers.png", "growth-payload.png"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.HasPrefix(string(data), "\x89PNG") {
			t.Errorf("%s is not a PNG (%d bytes, %v)", name, len(data), err)
		}
	}
}

func TestClaimTracer(t *testing.T) {
	var tr claimTracer
	ctx := context.Background()
	claim := tr.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "UPDATE t … FOR UPDATE SKIP LOCKED) RETURNING …"})
	other := tr.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "DELETE FROM t WHERE id = ANY($1)"})
	failed := tr.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT … SKIP LOCKED"})
	var b pgx.Batch
	b.Queue("SELECT set_config('synchronous_commit', 'off', true)")
	b.Queue("WITH picked AS (SELECT … FOR UPDATE SKIP LOCKED) UPDATE …")
	batch := tr.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{Batch: &b})
	var settle pgx.Batch
	settle.Queue("DELETE FROM t USING unnest($1, $2)")
	notClaim := tr.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{Batch: &settle})
	time.Sleep(2 * time.Millisecond) // a duration to measure, not synchronisation
	tr.TraceQueryEnd(claim, nil, pgx.TraceQueryEndData{})
	tr.TraceQueryEnd(other, nil, pgx.TraceQueryEndData{})
	tr.TraceQueryEnd(failed, nil, pgx.TraceQueryEndData{Err: errors.New("canceled")})
	tr.TraceBatchEnd(batch, nil, pgx.TraceBatchEndData{})
	tr.TraceBatchEnd(notClaim, nil, pgx.TraceBatchEndData{})
	took := tr.take()
	if len(took) != 2 || took[0] < 2 || took[0] > took[1] {
		t.Fatalf("took = %v; want the claim query's and the claim batch's times, sorted, at least 2ms each", took)
	}
	if again := tr.take(); len(again) != 0 {
		t.Fatalf("take kept %v", again)
	}
}

// The first fill's event ids are sampleEvent's; a refill's are new.
func TestBacklogIDs(t *testing.T) {
	first, refill := backlogInsertArgs(0, 5), backlogInsertArgs(3, 5)
	if id := first[0].(string) + "000000000042"; id != sampleEvent(42).ID {
		t.Errorf("first fill's id 42 = %q, want sampleEvent's %q", id, sampleEvent(42).ID)
	}
	if refill[0] == first[0] || !strings.Contains(refill[0].(string), "-0003-") {
		t.Errorf("refill 3's prefix %q; want one of its own", refill[0])
	}
}

// The backlog's generate_series rows are the rows outbox.PublishBatch
// writes for the same events, column for column.
func TestBacklogRowsAsPublishBatchWrites(t *testing.T) {
	o := testenv.NewOutboxTable(t)
	o.Publish(sampleEvent(0), sampleEvent(1))
	table := pgx.Identifier{o.Table.Name()}.Sanitize()
	ctx := context.Background()
	if _, err := o.Pool.Exec(ctx, backlogInsertSQL(table), backlogInsertArgs(1, 2)...); err != nil {
		t.Fatal(err)
	}
	rows, err := o.Pool.Query(ctx, `SELECT `+outboxsql.Columns+` FROM `+table+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []outbox.Row
	for rows.Next() {
		r, err := outboxsql.ScanRow[outbox.Row](rows)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d rows, want 2 published and 2 generated", len(got))
	}
	for i, gen := range got[2:] {
		pub := got[i]
		if want := strings.Replace(sampleEvent(i).ID, "-0000-", "-0001-", 1); gen.Event.ID != want {
			t.Errorf("generated row %d has id %q, want %q", i, gen.Event.ID, want)
		}
		for _, r := range []*outbox.Row{&pub, &gen} {
			r.ID, r.Event.ID, r.InsertedAt, r.AvailableAt = 0, "", time.Time{}, time.Time{}
		}
		if !reflect.DeepEqual(pub, gen) {
			t.Errorf("row %d:\npublished %+v\ngenerated %+v", i, pub, gen)
		}
	}
}
