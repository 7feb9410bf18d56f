package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "warren-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildWarren builds the command once per test process; every CLI test runs
// the real binary.
var buildWarren = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "warren")
	// go test puts its own GOROOT/bin first on PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

type result struct {
	stdout, stderr string
	code           int
}

// runWarren runs the built binary with AMQP_URL pointing at the test broker
// and stdin from stdin (empty when nil), so never a terminal.
func runWarren(t *testing.T, stdin []byte, args ...string) result {
	t.Helper()
	cmd := warrenCmd(t, stdin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run warren %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func warrenCmd(t *testing.T, stdin []byte, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := buildWarren()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.AMQPURL(t))
	cmd.Stdin = bytes.NewReader(stdin)
	return cmd
}

// ok runs warren and fails t unless it exits 0.
func ok(t *testing.T, args ...string) result {
	t.Helper()
	r := runWarren(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("warren %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %T from %.300q: %v", v, s, err)
	}
	return v
}

var (
	cliTypes   = []string{"workitem.created", "workitem.updated", "cycle.created", "module.deleted", "label.created"}
	cliClasses = []dlq.Class{dlq.ClassPermanent, dlq.ClassExhausted, dlq.ClassUndecodable, dlq.ClassUnhandled}
)

// deadMessages returns n dead messages of mixed types, classes and errors;
// the type and the class vary independently.
func deadMessages(top testenv.DeadLetterTopology, n int) []amqp.Publishing {
	out := make([]amqp.Publishing, n)
	for i := range out {
		class := cliClasses[(i/len(cliTypes))%len(cliClasses)]
		d := testenv.Dead{
			ID: fmt.Sprintf("ev-%05d", i), Type: cliTypes[i%len(cliTypes)], Class: class,
			Err: fmt.Sprintf("%s failure #%d", class, i%3), At: time.Now().Add(-time.Duration(i) * time.Second), Attempts: 1 + i%5,
		}
		if class == dlq.ClassUndecodable {
			d.Body = []byte("{not json")
		}
		out[i] = top.Message(d)
	}
	return out
}

func expiredMessages(n int) []amqp.Publishing {
	out := make([]amqp.Publishing, n)
	for i := range out {
		out[i] = amqp.Publishing{MessageId: fmt.Sprintf("exp-%03d", i), Type: cliTypes[i%len(cliTypes)], ContentType: "application/json",
			DeliveryMode: amqp.Persistent, Body: []byte(fmt.Sprintf(`{"event_id":"exp-%03d"}`, i))}
	}
	return out
}

// Dead letters that broke a contract are grouped by the contract and the
// field, from the headers the consumer wrote, and show them one by one;
// those whose error named no field are in no such group.
func TestCLIStatsGroupsContractFailuresByField(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	broken := func(id, contract, field string) amqp.Publishing {
		return top.Message(testenv.Dead{ID: id, Type: "workitem.updated", Class: dlq.ClassUndecodable, Attempts: 1,
			Err: "invalid event: contract " + contract + ": " + field + ": got number, want string", Contract: contract, Field: field})
	}
	testenv.PublishInOrder(t, conn, top.DLQ, []amqp.Publishing{
		broken("c1", "workitem.updated@1.0", "payload.data.state"),
		broken("c2", "workitem.updated@1.0", "payload.data.state"),
		broken("c3", "workitem.updated@1.0", "payload.data.name"),
		broken("c4", "workitem.updated@1.0", "payload.data.label_ids.0"),
		broken("c5", "workitem.updated@1.0", "payload.data.label_ids.12"),
		top.Message(testenv.Dead{ID: "d1", Type: "workitem.updated", Class: dlq.ClassUndecodable, Attempts: 1,
			Err: "invalid event: payload.data.state: json: cannot unmarshal number", Field: "payload.data.state"}),
		top.Message(testenv.Dead{ID: "p1", Type: "workitem.updated", Class: dlq.ClassPermanent, Attempts: 1, Err: "boom"}),
	})
	st := decodeJSON[dlqtool.Stats](t, ok(t, "dlq", "stats", "--queue", top.Consumer, "--json").stdout)
	got := map[string]int{}
	for _, g := range st.ByField {
		got[g.Key] = g.Count
	}
	want := map[string]int{"workitem.updated@1.0 payload.data.state": 2, "workitem.updated@1.0 payload.data.name": 1, "payload.data.state": 1,
		"workitem.updated@1.0 payload.data.label_ids.<n>": 2} // one failure, whichever element
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats by field:\n got %v\nwant %v", got, want)
	}
	human := ok(t, "dlq", "stats", "--queue", top.Consumer).stdout
	if !regexp.MustCompile(`\nCONTRACT AND FIELD +COUNT +OLDEST +NEWEST\n(.+\n)*workitem\.updated@1\.0 payload\.data\.state +2 `).MatchString(human) {
		t.Errorf("stats output lacks the contract and field section:\n%s", human)
	}
	show := ok(t, "dlq", "show", "--queue", top.Consumer, "--id", "c3").stdout
	if !regexp.MustCompile(`\n  contract +workitem\.updated@1\.0\n  field +payload\.data\.name\n`).MatchString(show) {
		t.Errorf("show lacks the contract and the field:\n%s", show)
	}
}

// 10,000 dead messages: stats groups them exactly; a filtered replay moves
// exactly the matching ones, to the origin queue only (a second queue on
// the consumer's fanout exchange stays empty), and the rest stay.
func TestCLIStatsAndFilteredReplayOf10000(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	sibling := testenv.Name(t, "sibling")
	testenv.CleanupQueues(t, sibling)
	if _, err := ch.QueueDeclare(sibling, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(sibling, "", top.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	dead := deadMessages(top, 9800)
	start := time.Now()
	testenv.PublishConfirmed(t, conn, top.DLQ, dead)
	top.Expire(t, conn, expiredMessages(200))
	t.Logf("published 10,000 dead messages in %v", time.Since(start))

	want := map[string]map[string]int{"class": {}, "type": {}, "error": {}}
	matching := map[string]bool{}
	for _, p := range dead {
		md := dlq.ParseMetadata(p.Headers)
		want["class"][string(md.Class)]++
		want["type"][p.Type]++
		want["error"][dlq.Signature(md.Class, md.Error)]++
		if strings.HasPrefix(p.Type, "workitem.") && (md.Class == dlq.ClassPermanent || md.Class == dlq.ClassExhausted) {
			matching[p.MessageId] = true
		}
	}
	for _, p := range expiredMessages(200) {
		want["class"]["expired"]++
		want["type"][p.Type]++
		want["error"][dlq.Signature(dlq.ClassExpired, "dead-lettered by the broker (expired) from queue "+top.Consumer)]++
	}

	start = time.Now()
	st := decodeJSON[dlqtool.Stats](t, ok(t, "dlq", "stats", "--queue", top.Consumer, "--json").stdout)
	t.Logf("stats over 10,000 messages took %v", time.Since(start))
	if st.Total != 10000 {
		t.Fatalf("stats total %d, want 10000", st.Total)
	}
	for name, groups := range map[string][]dlqtool.Group{"class": st.ByClass, "type": st.ByType, "error": st.ByError} {
		got := map[string]int{}
		for _, g := range groups {
			got[g.Key] = g.Count
		}
		if !reflect.DeepEqual(got, want[name]) {
			t.Errorf("stats by %s:\n got %v\nwant %v", name, got, want[name])
		}
	}
	// The example is the error of the group's first message in queue
	// order, and PublishConfirmed does not keep the order: any of #0-#2.
	human := ok(t, "dlq", "stats", "--queue", top.Consumer).stdout
	for _, s := range []string{top.DLQ + `: 10000 dead messages`, `\nCLASS +COUNT +OLDEST +NEWEST\n`, `\nexpired +200 `, `\nEVENT TYPE +COUNT`, `\nworkitem\.created +2000 `, `\nERROR SIGNATURE +COUNT +OLDEST +NEWEST +EXAMPLE\n`, `\npermanent: permanent failure #<n> +2450 .* permanent failure #[0-2]\n`} {
		if !regexp.MustCompile(s).MatchString(human) {
			t.Errorf("stats output lacks %s:\n%s", s, human)
		}
	}

	start = time.Now()
	r := ok(t, "dlq", "replay", "--queue", top.DLQ, "--type", "workitem.", "--class", "permanent,exhausted", "--yes", "--json")
	t.Logf("replay of %d matching messages took %v", len(matching), time.Since(start))
	res := decodeJSON[dlqtool.Result](t, r.stdout)
	if res.Done != len(matching) || res.Scanned != 10000 || res.Queues[top.Consumer] != len(matching) || len(res.Queues) != 1 {
		t.Fatalf("replay result %+v, want %d replayed to %s", res, len(matching), top.Consumer)
	}
	if n := testenv.QueueDepth(t, ch, sibling); n != 0 {
		t.Fatalf("the other queue on the fanout exchange got %d messages", n)
	}
	testenv.WaitFor(t, 60*time.Second, "the rest back in the DLQ", func() bool {
		return testenv.QueueDepth(t, ch, top.DLQ) == 10000-len(matching)
	})
	replayed := testenv.Drain(t, conn, top.Consumer)
	got := map[string]bool{}
	for _, d := range replayed {
		got[d.MessageId] = true
	}
	if len(replayed) != len(matching) || !reflect.DeepEqual(got, matching) {
		t.Fatalf("origin queue holds %d messages, want exactly the %d matching", len(replayed), len(matching))
	}
	left := decodeJSON[dlqtool.Stats](t, ok(t, "dlq", "stats", "--queue", top.Consumer, "--type", "workitem.", "--class", "permanent,exhausted", "--json").stdout)
	if left.Total != 0 {
		t.Fatalf("%d matching messages left in the DLQ", left.Total)
	}
}

// A crafted dead letter whose headers name another consumer's queue as its
// origin is replayed into the queue its DLQ belongs to, never into the one
// it names, and the command says how many such messages it met. show says
// where a replay sends it.
func TestCLIReplayIgnoresTheOriginInHeaders(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	victim := testenv.DeclareDeadLetterTopology(t, ch)
	crafted := top.Message(testenv.Dead{ID: "crafted", Type: "workitem.created", Class: dlq.ClassPermanent, Err: "x"})
	crafted.Headers[dlq.HeaderOriginQueue] = victim.Consumer
	honest := top.Message(testenv.Dead{ID: "honest", Type: "workitem.created", Class: dlq.ClassPermanent, Err: "x"})
	testenv.PublishInOrder(t, conn, top.DLQ, []amqp.Publishing{crafted, honest})

	show := ok(t, "dlq", "show", "--queue", top.Consumer, "crafted").stdout
	if want := regexp.MustCompile(`replays to +` + regexp.QuoteMeta(top.Consumer+" (not "+victim.Consumer+", which its headers name as its origin)")); !want.MatchString(show) {
		t.Errorf("show printed\n%s\nwant a line matching %s", show, want)
	}
	r := ok(t, "dlq", "replay", "--queue", top.Consumer, "--yes")
	if !strings.Contains(r.stdout, "replayed 2 of 2 messages") || !strings.Contains(r.stdout, "2 → "+top.Consumer) ||
		!strings.Contains(r.stdout, "1 of them named another origin queue in their headers; replayed into "+top.Consumer) {
		t.Errorf("replay said\n%s", r.stdout)
	}
	if n := testenv.QueueDepth(t, ch, victim.Consumer); n != 0 {
		t.Fatalf("the queue the crafted headers name got %d messages", n)
	}
	if got := testenv.MessageIDs(testenv.Drain(t, conn, top.Consumer)); !slices.Equal(got, []string{"crafted", "honest"}) {
		t.Fatalf("%s holds %v, want both replayed there", top.Consumer, got)
	}

	testenv.PublishInOrder(t, conn, top.DLQ, []amqp.Publishing{crafted})
	res := decodeJSON[dlqtool.Result](t, ok(t, "dlq", "replay", "--queue", top.Consumer, "--yes", "--json").stdout)
	if res.Done != 1 || res.ForeignOrigin != 1 || res.Queues[top.Consumer] != 1 || len(res.Queues) != 1 {
		t.Fatalf("replay --json: %+v", res)
	}
}

// SIGINT halfway through a rate-limited replay: the command stops with a
// non-zero exit and one line saying so, and every message is afterwards in
// the DLQ or the origin queue, exactly once.
func TestCLIReplayInterruptedBySIGINT(t *testing.T) {
	// Serial: its SIGINT must land within the 1.3 s the rate-limited
	// replay has left.
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	const total = 600
	msgs := deadMessages(top, total)
	testenv.PublishConfirmed(t, conn, top.DLQ, msgs)

	cmd := warrenCmd(t, nil, "dlq", "replay", "--queue", top.Consumer, "--rate", "300", "--yes")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the replay to get going", func() bool {
		return testenv.QueueDepth(t, ch, top.Consumer) >= total/3
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("interrupted replay exited %d (%v), want 1\nstderr: %s", code, err, stderr.String())
	}
	if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "interrupted") {
		t.Fatalf("stderr: %q", stderr.String())
	}

	testenv.WaitFor(t, 60*time.Second, "every message accounted for", func() bool {
		return testenv.QueueDepth(t, ch, top.DLQ)+testenv.QueueDepth(t, ch, top.Consumer) >= total
	})
	origin, dead := testenv.Drain(t, conn, top.Consumer), testenv.Drain(t, conn, top.DLQ)
	t.Logf("after SIGINT: %d in the origin queue, %d in the DLQ; stdout %q, stderr %q", len(origin), len(dead), stdout.String(), stderr.String())
	if len(origin) == 0 || len(origin) == total {
		t.Fatalf("the interrupt did not land mid-replay: %d of %d replayed", len(origin), total)
	}
	all := append(testenv.MessageIDs(origin), testenv.MessageIDs(dead)...)
	slices.Sort(all)
	var want []string
	for _, m := range msgs {
		want = append(want, m.MessageId)
	}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("origin (%d) + DLQ (%d) is not every message exactly once", len(origin), len(dead))
	}
	if !strings.Contains(stdout.String(), fmt.Sprintf("replayed %d of", len(origin))) {
		t.Errorf("the summary does not match what was moved (%d): %q", len(origin), stdout.String())
	}
}

// Export then import reproduces every message: body, every property, and
// headers of every AMQP type, RabbitMQ's x-death included.
func TestCLIExportImportRoundTrip(t *testing.T) {
	t.Parallel()
	conn, ch, src := testenv.NewDeadLetterTopology(t)
	dst := testenv.DeclareDeadLetterTopology(t, ch)
	odd := src.Message(testenv.Dead{ID: "odd", Type: "workitem.updated", Class: dlq.ClassExhausted, Err: "boom\nsecond line", Attempts: 5})
	for k, v := range (amqp.Table{
		"i8": int8(-3), "u8": uint8(200), "i16": int16(-300), "u16": uint16(60000), "i32": int32(-70000), "u32": uint32(4000000000),
		"i64": int64(-1 << 40), "f32": float32(1.25), "f64": 2.5e-300, "dec": amqp.Decimal{Scale: 2, Value: 12345},
		"arr": []any{"x", int32(1), amqp.Table{"k": "v"}}, "ts": time.Unix(1700000000, 0), "tbl": amqp.Table{"n": amqp.Table{"z": true}},
		"bin": []byte{0, 1, 255}, "void": nil, "not-utf8": "\xff\xfe",
	}) {
		odd.Headers[k] = v
	}
	odd.Body = []byte{0xff, 0x00, 'x'}
	odd.ContentType, odd.ContentEncoding, odd.Priority, odd.CorrelationId, odd.ReplyTo, odd.AppId, odd.Expiration =
		"application/octet-stream", "gzip", 7, "corr", "reply.q", "tests", "86400000"
	testenv.PublishInOrder(t, conn, src.DLQ, append(deadMessages(src, 30), odd))
	src.Expire(t, conn, expiredMessages(3))

	file := filepath.Join(t.TempDir(), "dead.jsonl")
	r := ok(t, "dlq", "export", "--queue", src.Consumer, "--output", file)
	if !strings.Contains(r.stderr, "exported 34 messages") {
		t.Fatalf("export said %q", r.stderr)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n != 34 {
		t.Fatalf("export file has %d lines, want 34", n)
	}
	if stdoutExport := ok(t, "dlq", "export", "--queue", src.Consumer).stdout; stdoutExport != string(data) {
		t.Fatal("export to standard output differs from export to a file")
	}

	if r := runWarren(t, nil, "dlq", "import", "--queue", dst.Consumer, file); r.code != 2 {
		t.Fatalf("import without --yes and no terminal: exit %d, %s", r.code, r.stderr)
	}
	// The messages name src's queue as their origin: into dst's DLQ only
	// when the operator names it.
	r = runWarren(t, nil, "dlq", "import", "--queue", dst.Consumer, "--yes", file)
	if r.code != 1 || !strings.Contains(r.stderr, "names another origin queue") || !strings.Contains(r.stderr, "--to") {
		t.Fatalf("import of another consumer's dead letters without --to: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := testenv.QueueDepth(t, ch, dst.DLQ); n != 0 {
		t.Fatalf("a refused import published %d messages", n)
	}
	r = ok(t, "dlq", "import", "--queue", dst.Consumer, "--to", dst.DLQ, "--yes", file)
	if !strings.Contains(r.stdout, "imported 34 of 34") {
		t.Fatalf("import said %q", r.stdout)
	}
	orig, copied := testenv.Drain(t, conn, src.DLQ), testenv.Drain(t, conn, dst.DLQ)
	if len(orig) != 34 || len(copied) != 34 {
		t.Fatalf("%d originals, %d copies", len(orig), len(copied))
	}
	for i := range orig {
		a, b := testenv.AsPublishing(orig[i]), testenv.AsPublishing(copied[i])
		// The one header an import adds: which import it came from.
		if id, _ := b.Headers[dlqtool.HeaderImportID].(string); len(id) != 32 {
			t.Fatalf("message %d: import id %q, want 32 hex digits", i, id)
		}
		delete(b.Headers, dlqtool.HeaderImportID)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("message %d differs after export and import:\n got %#v\nwant %#v", i, b, a)
		}
	}
	if _, ok := copied[33].Headers["x-death"]; !ok {
		t.Fatal("x-death lost in the round trip")
	}

	// Standard input works too.
	r = runWarren(t, data, "dlq", "import", "--queue", dst.Consumer, "--to", dst.DLQ, "--yes", "--json", "-")
	if r.code != 0 || decodeJSON[dlqtool.Result](t, r.stdout).Done != 34 {
		t.Fatalf("import from stdin: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}

	// Into the origin queue, the broker's death headers are left behind
	// (RabbitMQ would drop a message on its first retry as a dead-letter
	// cycle) and what they said is kept in warren's first-death headers.
	ok(t, "dlq", "import", "--queue", src.Consumer, "--to", src.Consumer, "--yes", file)
	back := testenv.Drain(t, conn, src.Consumer)
	if len(back) != 34 {
		t.Fatalf("origin queue holds %d messages after import --to, want 34", len(back))
	}
	expired := 0
	for _, d := range back {
		for name := range d.Headers {
			if name == "x-death" || strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-") {
				t.Errorf("message %s imported into its origin queue keeps %s", d.MessageId, name)
			}
		}
		if fd := dlq.ParseMetadata(d.Headers).FirstDeath; fd.Reason == "expired" && fd.Queue == src.Consumer {
			expired++
		}
	}
	if expired != 3 {
		t.Errorf("%d imported messages record the broker's expiry, want the 3 that expired", expired)
	}
}

// ls, show, stats and export leave the DLQ as it was: same count, same
// order, same content.
func TestCLIReadsLeaveQueueUnchanged(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	msgs := deadMessages(top, 200)
	testenv.PublishInOrder(t, conn, top.DLQ, msgs)

	ls := ok(t, "dlq", "ls", "--queue", top.Consumer).stdout
	if !strings.Contains(ls, "POS") || !strings.Contains(ls, "ev-00019") || strings.Contains(ls, "ev-00020") || !strings.Contains(ls, "showing 20 of 200; 200 messages") {
		t.Fatalf("ls output:\n%s", ls)
	}
	listed := decodeJSON[struct{ Messages []json.RawMessage }](t, ok(t, "dlq", "ls", "--queue", top.Consumer, "--limit", "0", "--type", "cycle.", "--json").stdout).Messages
	if len(listed) != 40 {
		t.Fatalf("ls --type cycle. --limit 0 listed %d, want 40", len(listed))
	}
	var first dlqtool.Message
	if err := first.UnmarshalJSON(listed[0]); err != nil || first.EventID != "ev-00002" || first.Position != 2 {
		t.Fatalf("first listed: %+v, %v", first, err)
	}
	show := ok(t, "dlq", "show", "--queue", top.Consumer, "ev-00042").stdout
	for _, s := range []string{"event id", "ev-00042", "class", "permanent", "attempts", "3", "origin queue", top.Consumer, "x-warren-error", "body ("} {
		if !strings.Contains(show, s) {
			t.Errorf("show output lacks %q:\n%s", s, show)
		}
	}
	ok(t, "dlq", "show", "--queue", top.Consumer, "--class", "undecodable", "--limit", "3", "--json")
	ok(t, "dlq", "stats", "--queue", top.Consumer)
	ok(t, "dlq", "export", "--queue", top.Consumer)
	ok(t, "dlq", "replay", "--queue", top.Consumer, "--dry-run")
	ok(t, "dlq", "purge", "--queue", top.Consumer, "--dry-run")

	testenv.WaitFor(t, 60*time.Second, "all 200 in the DLQ", func() bool { return testenv.QueueDepth(t, ch, top.DLQ) == 200 })
	after := testenv.Drain(t, conn, top.DLQ)
	if len(after) != 200 {
		t.Fatalf("DLQ holds %d messages after reading, want 200", len(after))
	}
	for i, d := range after {
		if !reflect.DeepEqual(testenv.AsPublishing(d), msgs[i]) {
			t.Fatalf("message %d changed or moved:\n got %#v\nwant %#v", i, testenv.AsPublishing(d), msgs[i])
		}
	}
}

func TestCLIPurge(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 100))
	r := ok(t, "dlq", "purge", "--queue", top.Consumer, "--class", "undecodable", "--dry-run")
	if !strings.Contains(r.stdout, "would purge 25 of 100") || !strings.Contains(r.stdout, "nothing was changed") {
		t.Fatalf("dry run said %q", r.stdout)
	}
	r = ok(t, "dlq", "purge", "--queue", top.Consumer, "--class", "undecodable", "--limit", "10", "--yes", "--json")
	if res := decodeJSON[dlqtool.Result](t, r.stdout); res.Done != 10 {
		t.Fatalf("purge --limit 10 purged %d", res.Done)
	}
	testenv.WaitFor(t, 60*time.Second, "90 left", func() bool { return testenv.QueueDepth(t, ch, top.DLQ) == 90 })
	left := decodeJSON[dlqtool.Stats](t, ok(t, "dlq", "stats", "--queue", top.Consumer, "--json").stdout)
	for _, g := range left.ByClass {
		if g.Key == "undecodable" && g.Count != 15 {
			t.Fatalf("%d undecodable left, want 15", g.Count)
		}
	}
}

// Bad input of every kind gets one line on stderr, no stack trace, and a
// non-zero exit: 2 for a wrong command line, 1 for a failed operation.
func TestCLIBadInput(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 5))
	badFile := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(badFile, []byte(`{"body":"ok"}`+"\n"+`{"body":"x","headers":{"n":{"type":"int8","value":999}}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown queue", []string{"dlq", "ls", "--queue", top.Consumer + "-nope"}, 1, "no such queue"},
		{"unknown queue, full name", []string{"dlq", "stats", "--queue", "nope-" + top.DLQ}, 1, "no such queue"},
		{"unreachable broker", []string{"dlq", "ls", "--queue", top.Consumer, "--amqp-url", "amqp://guest:s3cret@127.0.0.1:1/"}, 1, "connection refused"},
		{"malformed class", []string{"dlq", "replay", "--queue", top.Consumer, "--class", "permanant", "--yes"}, 2, `unknown error class "permanant"`},
		{"malformed age", []string{"dlq", "purge", "--queue", top.Consumer, "--older-than", "yesterday", "--yes"}, 2, "--older-than"},
		{"contradictory ages", []string{"dlq", "ls", "--queue", top.Consumer, "--older-than", "2h", "--newer-than", "1h"}, 2, "no message is older"},
		{"negative limit", []string{"dlq", "ls", "--queue", top.Consumer, "--limit", "-1"}, 2, "--limit"},
		{"negative rate", []string{"dlq", "replay", "--queue", top.Consumer, "--rate", "-5", "--yes"}, 2, "--rate"},
		{"unknown flag", []string{"dlq", "ls", "--queue", top.Consumer, "--colour"}, 2, "--colour"},
		{"missing queue", []string{"dlq", "ls"}, 2, "--queue is required"},
		{"unknown subcommand", []string{"dlq", "list"}, 2, `unknown subcommand "list"`},
		{"unknown command", []string{"dlx"}, 2, `unknown command "dlx"`},
		{"stray argument", []string{"dlq", "ls", "--queue", top.Consumer, "extra"}, 2, `unexpected argument "extra"`},
		{"replay without --yes", []string{"dlq", "replay", "--queue", top.Consumer}, 2, "--yes"},
		{"missing target", []string{"dlq", "replay", "--queue", top.Consumer, "--to", top.Consumer + "-nope", "--yes"}, 1, "no such queue"},
		{"damaged import", []string{"dlq", "import", "--queue", top.Consumer, "--yes", badFile}, 1, "line 2"},
		{"missing import file", []string{"dlq", "import", "--queue", top.Consumer, "--yes", badFile + ".nope"}, 1, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runWarren(t, nil, c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", r.code, c.code, r.stderr)
			}
			first, _, _ := strings.Cut(r.stderr, "\n")
			if !strings.Contains(first, c.want) {
				t.Fatalf("first line of stderr %q lacks %q", first, c.want)
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if len(lines) > 2 || (len(lines) == 2 && !strings.HasPrefix(lines[1], "Run 'warren")) {
				t.Fatalf("more than a one-line error:\n%s", r.stderr)
			}
			for _, bad := range []string{"s3cret", "goroutine", "panic", ".go:"} {
				if strings.Contains(r.stderr+r.stdout, bad) {
					t.Fatalf("output contains %q:\n%s%s", bad, r.stdout, r.stderr)
				}
			}
		})
	}
	if n := testenv.QueueDepth(t, ch, top.DLQ); n != 5 {
		t.Fatalf("bad command lines changed the DLQ: %d messages, want 5", n)
	}
	if n := testenv.QueueDepth(t, ch, top.Consumer); n != 0 {
		t.Fatalf("bad command lines replayed %d messages", n)
	}
}

func TestCLIHelp(t *testing.T) {
	t.Parallel()
	r := ok(t, "--help")
	if !strings.Contains(r.stdout, "dlq ") {
		t.Fatalf("warren --help lacks dlq:\n%s", r.stdout)
	}
	r = ok(t, "dlq", "--help")
	for _, s := range []string{"Usage: warren dlq <subcommand>", "Subcommands:", "Filters", "Examples:", "Exit status"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("warren dlq --help lacks %q", s)
		}
	}
	for _, sub := range dlqSubs {
		r := ok(t, "dlq", sub.name, "--help")
		for _, s := range []string{"Usage: warren dlq " + sub.name, "Flags:", "--queue NAME", "--amqp-url URL", "Examples:\n  warren dlq"} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("warren dlq %s --help lacks %q:\n%s", sub.name, s, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "guest:guest") {
			t.Errorf("warren dlq %s --help prints the default password", sub.name)
		}
	}
	if r := runWarren(t, nil, "dlq"); r.code != 2 {
		t.Fatalf("warren dlq with no subcommand: exit %d", r.code)
	}
}

// On a terminal, replay and purge say what they are about to do, with the
// numbers, and do nothing unless the answer is yes. (In process, with the
// terminal faked: the binary tests never have one.)
func TestDLQConfirmsOnATerminal(t *testing.T) {
	// Serial: replaces the package's dlqStdin and isTerminal, which every
	// in-process run reads.
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 5))

	oldStdin, oldIsTerminal := dlqStdin, isTerminal
	t.Cleanup(func() { dlqStdin, isTerminal = oldStdin, oldIsTerminal })
	isTerminal = func(any) bool { return true }
	runWith := func(answer string, args ...string) (int, string) {
		dlqStdin = strings.NewReader(answer)
		var stdout, stderr bytes.Buffer
		env := &cliEnv{stdout: &stdout, stderr: &stderr, getenv: func(k string) string {
			if k == "AMQP_URL" {
				return testenv.AMQPURL(t)
			}
			return ""
		}}
		code := run(context.Background(), env, args)
		return code, stderr.String()
	}

	code, stderr := runWith("n\n", "dlq", "replay", "--queue", top.Consumer, "--type", "workitem.")
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("Replay 2 of 5 messages in %s to %s? [y/N]", top.DLQ, top.Consumer)) || !strings.Contains(stderr, "cancelled") {
		t.Fatalf("declined replay: exit %d, stderr %q", code, stderr)
	}
	code, stderr = runWith("", "dlq", "purge", "--queue", top.Consumer)
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("Delete 5 of 5 messages in %s for good? [y/N]", top.DLQ)) {
		t.Fatalf("purge with no answer: exit %d, stderr %q", code, stderr)
	}
	testenv.WaitFor(t, 60*time.Second, "all 5 still in the DLQ", func() bool { return testenv.QueueDepth(t, ch, top.DLQ) == 5 })
	if n := testenv.QueueDepth(t, ch, top.Consumer); n != 0 {
		t.Fatalf("a declined replay moved %d messages", n)
	}

	if code, stderr = runWith("y\n", "dlq", "replay", "--queue", top.Consumer, "--type", "workitem."); code != 0 {
		t.Fatalf("confirmed replay: exit %d, stderr %q", code, stderr)
	}
	if n := testenv.QueueDepth(t, ch, top.Consumer); n != 2 {
		t.Fatalf("confirmed replay moved %d messages, want 2", n)
	}
}

// answerAfter is a terminal whose operator answers only after arrive has
// run: messages that die while the question waits.
type answerAfter struct {
	arrive func()
	answer io.Reader
}

func (a *answerAfter) Read(b []byte) (int, error) {
	if a.arrive != nil {
		a.arrive()
		a.arrive = nil
	}
	return a.answer.Read(b)
}

// A confirmed purge or replay acts on at most the messages the question
// counted: the operator said yes to that number, not to whatever matches
// by the time the answer comes.
func TestDLQActsOnAtMostWhatWasConfirmed(t *testing.T) {
	// Serial: replaces the package's dlqStdin and isTerminal, which every
	// in-process run reads.
	conn, _, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 5))

	oldStdin, oldIsTerminal := dlqStdin, isTerminal
	t.Cleanup(func() { dlqStdin, isTerminal = oldStdin, oldIsTerminal })
	isTerminal = func(any) bool { return true }
	var later []amqp.Publishing
	for _, m := range deadMessages(top, 3) {
		m.MessageId = "later-" + m.MessageId
		later = append(later, m)
	}
	dlqStdin = &answerAfter{arrive: func() { testenv.PublishInOrder(t, conn, top.DLQ, later) }, answer: strings.NewReader("y\n")}
	var stdout, stderr bytes.Buffer
	env := &cliEnv{stdout: &stdout, stderr: &stderr, getenv: func(k string) string {
		if k == "AMQP_URL" {
			return testenv.AMQPURL(t)
		}
		return ""
	}}
	if code := run(context.Background(), env, []string{"dlq", "purge", "--queue", top.Consumer}); code != 0 ||
		!strings.Contains(stderr.String(), fmt.Sprintf("Delete 5 of 5 messages in %s for good?", top.DLQ)) {
		t.Fatalf("confirmed purge: exit %d\nstdout %s\nstderr %s", code, stdout.String(), stderr.String())
	}
	left := testenv.Drain(t, conn, top.DLQ)
	if len(left) != 3 {
		t.Fatalf("the DLQ holds %d messages after purging the 5 confirmed, want the 3 that arrived meanwhile", len(left))
	}
	for _, d := range left {
		if !strings.HasPrefix(d.MessageId, "later-") {
			t.Errorf("message %q was left and one that arrived later purged", d.MessageId)
		}
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	bar := &progressBar{w: &out, verb: "replaying", doneWord: "replayed", start: time.Now()}
	bar.update(dlqtool.Progress{Total: 100, Scanned: 1})
	bar.clear()
	if out.Len() != 0 {
		t.Fatalf("a bar was drawn for an operation younger than %v: %q", progressDelay, out.String())
	}
	bar.start = time.Now().Add(-time.Second)
	bar.update(dlqtool.Progress{Total: 100, Scanned: 50, Done: 10})
	bar.clear()
	want := "\rreplaying [" + strings.Repeat("=", 15) + strings.Repeat(" ", 15) + "] 50/100, 10 replayed\r\033[K"
	if out.String() != want {
		t.Fatalf("bar drew %q, want %q", out.String(), want)
	}

	out.Reset()
	check := &progressBar{w: &out, verb: "checking", doneWord: "matched", start: time.Now().Add(-time.Second)}
	check.update(dlqtool.Progress{Total: 10, Scanned: 10, Matched: 4})
	if !strings.HasSuffix(out.String(), "] 10/10, 4 matched") {
		t.Fatalf("a dry run's bar drew %q", out.String())
	}

	c := &dlqCall{env: &cliEnv{stderr: &out}}
	if prog, _ := c.progress("x", "y"); prog != nil {
		t.Fatal("a progress bar on a writer that is not a terminal")
	}
}

func TestCleanEscapesTerminalControls(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain ✓":          "plain ✓",
		"red \x1b[31m":     `red \x1b[31m`,
		"line\nbreak\ttab": `line\nbreak\ttab`,
		"bad \xff utf8":    `bad \xff utf8`,
		"rtl \u202eevil":   `rtl \u202eevil`,
		"real \uFFFD kept": "real \uFFFD kept",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// A message moved back from a DLQ and dead again has lost the broker's
// x-death; show still says the broker once dead-lettered it, and why.
func TestShowPrintsFirstBrokerDeath(t *testing.T) {
	t.Parallel()
	died := time.Unix(1700000000, 0)
	h := dlq.StripDeaths(amqp.Table{"x-death": []any{amqp.Table{"queue": "webhook", "reason": "expired", "count": int64(1), "time": died}}}, "webhook")
	h = dlq.Stamp(h, dlq.Failure{Err: "boom", At: died.Add(time.Hour), Queue: "webhook", Consumer: "webhook"}, 3, dlq.ClassExhausted)
	m := dlqtool.Message{Metadata: dlq.ParseMetadata(h), Publishing: amqp.Publishing{Headers: h}}
	var out bytes.Buffer
	if err := printMessage(&out, &m, "webhook", died.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if want := "first broker death  expired from queue webhook at 2023-11-14T22:13:20Z (2h"; !strings.Contains(out.String(), want) {
		t.Fatalf("show printed\n%s\nwant a line containing %q", out.String(), want)
	}
}

// Plane publishes with no message_id, and other clients may set a
// message_id of their own (a publish id) that is not the event's id:
// `dlq show` must find a dead letter by its body's event_id in both cases,
// and by the message_id too.
func TestCLIShowFindsByBodyEventID(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	plane := top.Message(testenv.Dead{ID: "plane-ev-1", Type: "issue.updated", Class: dlq.ClassPermanent, Err: "plane failure", Attempts: 1})
	plane.MessageId, plane.Type = "", "" // as Plane's services publish
	publishID := top.Message(testenv.Dead{ID: "body-ev-2", Type: "cycle.created", Class: dlq.ClassPermanent, Err: "other failure", Attempts: 1})
	publishID.MessageId = "publish-id-2" // a client's own id, not the event's
	other := top.Message(testenv.Dead{ID: "ev-3", Type: "cycle.created", Class: dlq.ClassPermanent, Err: "unrelated", Attempts: 1})
	testenv.PublishInOrder(t, conn, top.DLQ, []amqp.Publishing{other, plane, publishID})

	for _, tc := range []struct{ id, wantErr string }{
		{"plane-ev-1", "plane failure"},
		{"body-ev-2", "other failure"},
		{"publish-id-2", "other failure"},
	} {
		r := runWarren(t, nil, "dlq", "show", "--queue", top.Consumer, "--id", tc.id)
		if r.code != 0 || !strings.Contains(r.stdout, tc.wantErr) || strings.Count(r.stdout, "── message at position") != 1 {
			t.Errorf("dlq show --id %s: exit %d\nstdout: %s\nstderr: %s", tc.id, r.code, r.stdout, r.stderr)
		}
	}
}

// A malformed AMQP URL is a wrong command line, exit 2, as in every warren
// command, whether it was given with --amqp-url or in $AMQP_URL; the error
// says which, and never shows the password.
func TestCLIMalformedURLIsAUsageError(t *testing.T) {
	t.Parallel()
	const bad = "amqp://guest:s3cret@127.0.0.1:notaport/"
	check := func(t *testing.T, r result, want string) {
		t.Helper()
		if r.code != 2 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr+r.stdout, "s3cret") {
			t.Fatalf("exit %d, want 2 and an error naming %s without the password\nstdout: %s\nstderr: %s", r.code, want, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"ls"}, {"stats"}, {"replay", "--yes"}, {"purge", "--yes"}, {"export"}} {
		check(t, runWarren(t, nil, append([]string{"dlq", args[0], "--queue", "q", "--amqp-url", bad}, args[1:]...)...), "--amqp-url")
	}
	cmd := warrenCmd(t, nil, "dlq", "ls", "--queue", "q")
	cmd.Env = append(cmd.Env, "AMQP_URL="+bad) // the last value of a name wins
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	check(t, result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}, "$AMQP_URL")
}

// Human output starts with the broker and vhost acted on, password masked
// (on stderr for export, whose standard output is the data); --json output
// stays pure JSON.
func TestCLIPrintsTheBroker(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 3))
	rawURL := testenv.AMQPURL(t)
	var want bytes.Buffer
	printBroker(&want, rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	file := filepath.Join(t.TempDir(), "dead.jsonl")
	noPassword := func(t *testing.T, out string) {
		t.Helper()
		if password != "" && strings.Contains(out, ":"+password+"@") {
			t.Fatalf("output shows the password:\n%s", out)
		}
	}

	for _, args := range [][]string{
		{"ls"}, {"show"}, {"stats"}, {"replay", "--dry-run"}, {"purge", "--dry-run"},
	} {
		r := ok(t, append([]string{"dlq", args[0], "--queue", top.Consumer}, args[1:]...)...)
		if !strings.HasPrefix(r.stdout, want.String()) {
			t.Errorf("dlq %s: stdout does not start with %q:\n%s", args[0], want.String(), r.stdout)
		}
		noPassword(t, r.stdout+r.stderr)

		r = ok(t, append([]string{"dlq", args[0], "--queue", top.Consumer, "--json"}, args[1:]...)...)
		if !json.Valid([]byte(r.stdout)) || strings.Contains(r.stdout, "broker ") {
			t.Errorf("dlq %s --json: not pure JSON:\n%s", args[0], r.stdout)
		}
	}
	r := ok(t, "dlq", "export", "--queue", top.Consumer, "--output", file)
	if !strings.HasPrefix(r.stderr, want.String()) || r.stdout != "" {
		t.Errorf("dlq export: stderr does not start with %q, or stdout is not empty:\nstdout: %s\nstderr: %s", want.String(), r.stdout, r.stderr)
	}
	if data := ok(t, "dlq", "export", "--queue", top.Consumer).stdout; strings.Contains(data, "broker ") {
		t.Errorf("dlq export to stdout mixes the broker line into the data:\n%s", data)
	}
	r = ok(t, "dlq", "import", "--queue", top.Consumer, "--to", top.Consumer, "--yes", file)
	if !strings.HasPrefix(r.stdout, want.String()) {
		t.Errorf("dlq import: stdout does not start with %q:\n%s", want.String(), r.stdout)
	}
	noPassword(t, r.stdout+r.stderr)
	r = ok(t, "dlq", "import", "--queue", top.Consumer, "--to", top.Consumer, "--yes", "--allow-duplicates", "--json", file)
	if !json.Valid([]byte(r.stdout)) {
		t.Errorf("dlq import --json: not pure JSON:\n%s", r.stdout)
	}
}

// A list cut by --limit says so, with how many match in all (--json too);
// output that is not a terminal has every text whole.
func TestCLIListSaysWhenCut(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	msgs := deadMessages(top, 30)
	long := "upstream said: " + strings.Repeat("a very long reason ", 12) + "(the end)"
	msgs[8] = top.Message(testenv.Dead{ID: "long", Type: "module.deleted", Class: dlq.ClassPermanent, Err: long, Attempts: 1})
	testenv.PublishInOrder(t, conn, top.DLQ, msgs)

	if out := ok(t, "dlq", "ls", "--queue", top.Consumer, "--limit", "5").stdout; !strings.Contains(out, "showing 5 of 30; 30 messages in "+top.DLQ) {
		t.Errorf("ls --limit 5 does not say it cut the list:\n%s", out)
	}
	// cycle.created is every fifth message: 6 of 30.
	if out := ok(t, "dlq", "ls", "--queue", top.Consumer, "--type", "cycle.", "--limit", "2").stdout; !strings.Contains(out, "showing 2 of 6;") {
		t.Errorf("ls --type cycle. --limit 2 does not say it cut the list:\n%s", out)
	}
	out := ok(t, "dlq", "ls", "--queue", top.Consumer, "--limit", "0").stdout
	if strings.Contains(out, "showing") || !strings.Contains(out, "30 shown") {
		t.Errorf("ls --limit 0 says it cut the list:\n%s", out)
	}
	if !strings.Contains(out, long) {
		t.Errorf("ls into a pipe cut the error text %q:\n%s", long, out)
	}
	if out := ok(t, "dlq", "stats", "--queue", top.Consumer, "--by", "error", "--top", "0").stdout; !strings.Contains(out, long) {
		t.Errorf("stats into a pipe cut the error:\n%s", out)
	}
	if out := ok(t, "dlq", "show", "--queue", top.Consumer, "--type", "cycle.").stdout; !strings.Contains(out, "showing 1 of 6;") {
		t.Errorf("show of the first match does not say how many match:\n%s", out)
	}

	type listing struct {
		Queue    string
		Total    int
		Messages []json.RawMessage
	}
	for _, c := range []struct {
		args        []string
		total, msgs int
	}{
		{[]string{"ls", "--limit", "5"}, 30, 5},
		{[]string{"ls", "--type", "cycle.", "--limit", "2"}, 6, 2},
		{[]string{"ls", "--limit", "0"}, 30, 30},
		{[]string{"ls", "--limit", "50"}, 30, 30},
		{[]string{"show", "--type", "cycle."}, 6, 1},
	} {
		l := decodeJSON[listing](t, ok(t, append([]string{"dlq", c.args[0], "--queue", top.Consumer, "--json"}, c.args[1:]...)...).stdout)
		if l.Queue != top.DLQ || l.Total != c.total || len(l.Messages) != c.msgs {
			t.Errorf("dlq %v --json: queue %q, total %d, %d messages; want %s, %d, %d", c.args, l.Queue, l.Total, len(l.Messages), top.DLQ, c.total, c.msgs)
		}
	}
}

// A replay or import to a queue that does not exist fails before it reads,
// asks or publishes anything, with one clear line and exit 1; it used to
// print "replayed 0 of 0" first.
func TestCLIReplayToMissingQueue(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 5))
	file := filepath.Join(t.TempDir(), "dead.jsonl")
	ok(t, "dlq", "export", "--queue", top.Consumer, "--output", file)
	missing := top.Consumer + "-nosuchqueue"

	for _, args := range [][]string{
		{"replay", "--yes"}, {"replay", "--dry-run"}, {"replay", "--yes", "--json"}, {"import", "--yes", file},
	} {
		r := runWarren(t, nil, append([]string{"dlq", args[0], "--queue", top.Consumer, "--to", missing}, args[1:]...)...)
		want := "warren dlq: --to " + missing + ": no such queue on this broker; nothing was changed\n"
		if r.code != 1 || r.stderr != want || strings.Contains(r.stdout, "replayed") || strings.Contains(r.stdout, "imported") || strings.Contains(r.stdout, "{") {
			t.Errorf("dlq %v --to %s: exit %d, want 1 and only %q\nstdout: %s\nstderr: %s", args, missing, r.code, want, r.stdout, r.stderr)
		}
	}
	if n := testenv.QueueDepth(t, ch, top.DLQ); n != 5 {
		t.Fatalf("the DLQ holds %d messages, want 5", n)
	}
}

// stats --by error groups by failure signature: 12 dead letters whose
// errors differ only by an id are one row of 12, with an example error.
func TestCLIStatsGroupsBySignature(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	var msgs []amqp.Publishing
	for i := range 12 {
		msgs = append(msgs, top.Message(testenv.Dead{ID: fmt.Sprintf("sig-%d", i), Type: "workitem.updated", Class: dlq.ClassPermanent,
			Err: fmt.Sprintf("work item %d not found (request 7f3a%04x9c)", 1000+i, i*7919), Attempts: 1}))
	}
	testenv.PublishInOrder(t, conn, top.DLQ, msgs)

	st := decodeJSON[dlqtool.Stats](t, ok(t, "dlq", "stats", "--queue", top.Consumer, "--json").stdout)
	want := dlqtool.Group{Key: dlq.Signature(dlq.ClassPermanent, "work item 1000 not found (request 7f3a00009c)"), Count: 12,
		Example: "work item 1000 not found (request 7f3a00009c)"}
	if len(st.ByError) != 1 || st.ByError[0].Key != want.Key || st.ByError[0].Count != 12 || st.ByError[0].Example != want.Example {
		t.Fatalf("stats --json by_error: %+v\nwant one group %+v", st.ByError, want)
	}
	out := ok(t, "dlq", "stats", "--queue", top.Consumer, "--by", "error").stdout
	rows := regexp.MustCompile(`(?m)^permanent: .*$`).FindAllString(out, -1)
	if len(rows) != 1 || !regexp.MustCompile(`^`+regexp.QuoteMeta(want.Key)+` +12 .* `+regexp.QuoteMeta(want.Example)+`$`).MatchString(rows[0]) {
		t.Fatalf("stats --by error printed %d rows, want one of 12 with its example:\n%s", len(rows), out)
	}
}

// purge --archive writes exactly the messages it purges to a new file, as
// export does, before purging them, and the file imports back; an archive
// that cannot be written purges nothing.
func TestCLIPurgeArchive(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	msgs := deadMessages(top, 20) // permanent: ev-00000 to ev-00004
	testenv.PublishInOrder(t, conn, top.DLQ, msgs)
	dir := t.TempDir()

	for _, bad := range []string{filepath.Join(dir, "no-such-dir", "a.jsonl"), dir} {
		r := runWarren(t, nil, "dlq", "purge", "--queue", top.Consumer, "--class", "permanent", "--archive", bad, "--yes")
		if r.code != 1 || !strings.Contains(r.stderr, "--archive") || !strings.Contains(r.stderr, "nothing was purged") {
			t.Errorf("purge --archive %s: exit %d, want 1 and a word that nothing was purged\nstderr: %s", bad, r.code, r.stderr)
		}
	}
	if n := testenv.QueueDepth(t, ch, top.DLQ); n != 20 {
		t.Fatalf("a purge whose archive failed left %d of 20 messages", n)
	}

	archive := filepath.Join(dir, "permanent.jsonl")
	r := ok(t, "dlq", "purge", "--queue", top.Consumer, "--class", "permanent", "--archive", archive, "--yes")
	if !strings.Contains(r.stdout, "purged 5 of 20") || !strings.Contains(r.stdout, "archived 5 messages to "+archive) {
		t.Errorf("purge --archive said:\n%s", r.stdout)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	archived, err := dlqtool.ReadMessages(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range archived {
		ids = append(ids, m.MessageId)
	}
	if want := []string{"ev-00000", "ev-00001", "ev-00002", "ev-00003", "ev-00004"}; !slices.Equal(ids, want) {
		t.Fatalf("archive holds %v, want the purged %v", ids, want)
	}
	for i, m := range archived {
		if !reflect.DeepEqual(m.Publishing, msgs[i]) {
			t.Fatalf("archived message %d differs from what was purged:\n got %#v\nwant %#v", i, m.Publishing, msgs[i])
		}
	}
	if left := testenv.MessageIDs(testenv.Drain(t, conn, top.DLQ)); len(left) != 15 || slices.Contains(left, "ev-00000") {
		t.Fatalf("DLQ holds %v after the purge, want the 15 others", left)
	}

	// An archive is never overwritten.
	r = runWarren(t, nil, "dlq", "purge", "--queue", top.Consumer, "--archive", archive, "--yes")
	if r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("purge --archive onto an existing file: exit %d\nstderr: %s", r.code, r.stderr)
	}
	ok(t, "dlq", "import", "--queue", top.Consumer, "--yes", archive)
	back := testenv.Drain(t, conn, top.DLQ)
	if len(back) != 5 {
		t.Fatalf("importing the archive gave back %d messages, want the 5 purged", len(back))
	}
	for i, d := range back {
		p := testenv.AsPublishing(d)
		delete(p.Headers, dlqtool.HeaderImportID)
		if !reflect.DeepEqual(p, msgs[i]) {
			t.Fatalf("message %d imported from the archive differs from the one purged:\n got %#v\nwant %#v", i, p, msgs[i])
		}
	}
}

// Importing the same file twice is refused while the first import's
// messages are in the target queue, with any name for the file; with
// --allow-duplicates it goes ahead.
func TestCLIImportTwice(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 6))
	dir := t.TempDir()
	file := filepath.Join(dir, "dead.jsonl")
	ok(t, "dlq", "export", "--queue", top.Consumer, "--output", file)
	testenv.Drain(t, conn, top.DLQ)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(dir, "copy.jsonl")
	if err := os.WriteFile(renamed, data, 0o600); err != nil {
		t.Fatal(err)
	}

	ok(t, "dlq", "import", "--queue", top.Consumer, "--yes", file)
	for _, again := range []result{
		runWarren(t, nil, "dlq", "import", "--queue", top.Consumer, "--yes", renamed),
		runWarren(t, data, "dlq", "import", "--queue", top.Consumer, "--yes", "-"),
	} {
		if again.code != 1 || !strings.Contains(again.stderr, "already imported into "+top.DLQ) || !strings.Contains(again.stderr, "--allow-duplicates") {
			t.Errorf("second import of the same file: exit %d, want 1 and a refusal naming --allow-duplicates\nstdout: %s\nstderr: %s", again.code, again.stdout, again.stderr)
		}
	}
	if n := testenv.QueueDepth(t, ch, top.DLQ); n != 6 {
		t.Fatalf("the DLQ holds %d messages after a refused second import, want 6", n)
	}
	// Another file is another import.
	other := filepath.Join(dir, "other.jsonl")
	if err := os.WriteFile(other, exportLine(t, amqp.Publishing{MessageId: "other", Body: []byte(`{"event_id":"other"}`)}), 0o600); err != nil {
		t.Fatal(err)
	}
	ok(t, "dlq", "import", "--queue", top.Consumer, "--yes", other)

	if r := ok(t, "dlq", "import", "--queue", top.Consumer, "--yes", "--allow-duplicates", file); !strings.Contains(r.stdout, "imported 6 of 6") {
		t.Fatalf("import --allow-duplicates said:\n%s", r.stdout)
	}
	if n := len(testenv.Drain(t, conn, top.DLQ)); n != 13 {
		t.Fatalf("the DLQ holds %d messages, want 6 + 1 + 6 with --allow-duplicates", n)
	}
}

// stats without --queue finds every warren DLQ of the vhost through the
// management API and counts each exactly, in JSON and for a human.
func TestCLIStatsOfEveryDLQ(t *testing.T) {
	// Serial: reads every DLQ of the vhost, which the other tests declare
	// and delete.
	testenv.RequireManagement(t)
	conn, _, full := testenv.NewDeadLetterTopology(t)
	_, _, empty := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, full.DLQ, deadMessages(full, 7))

	type all struct {
		Total  int             `json:"total"`
		Queues []dlqtool.Stats `json:"queues"`
	}
	find := func(a all, queue string) (dlqtool.Stats, bool) {
		for _, st := range a.Queues {
			if st.Queue == queue {
				return st, true
			}
		}
		return dlqtool.Stats{}, false
	}
	// The management API lists a new queue within its refresh interval
	// (5 s by default): ask again until both appear.
	var got all
	deadline := time.Now().Add(time.Minute)
	for {
		got = decodeJSON[all](t, ok(t, "dlq", "stats", "--json").stdout)
		_, a := find(got, full.DLQ)
		_, b := find(got, empty.DLQ)
		if a && b {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats --json without --queue does not list %s and %s: %+v", full.DLQ, empty.DLQ, got)
		}
		time.Sleep(200 * time.Millisecond) // another process's refresh; nothing to wait on
	}
	if st, _ := find(got, full.DLQ); st.Total != 7 || len(st.ByClass) == 0 {
		t.Fatalf("%s: %+v, want 7 dead messages with their groups", full.DLQ, st)
	}
	if st, _ := find(got, empty.DLQ); st.Total != 0 {
		t.Fatalf("%s: %+v, want 0", empty.DLQ, st)
	}
	sum := 0
	for _, st := range got.Queues {
		sum += st.Total
	}
	if got.Total != sum {
		t.Fatalf("total %d is not the sum of the queues' totals %d", got.Total, sum)
	}

	out := ok(t, "dlq", "stats").stdout
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^broker amqp://`),
		regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(full.DLQ) + ` +7$`),
		regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(empty.DLQ) + ` +0$`),
		regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(full.DLQ) + `: 7 dead messages$`),
	} {
		if !want.MatchString(out) {
			t.Fatalf("stats without --queue: no line matching %s in:\n%s", want, out)
		}
	}
	if strings.Contains(out, empty.DLQ+": 0 dead messages") {
		t.Fatalf("stats printed the groups of an empty DLQ:\n%s", out)
	}

	r := runWarren(t, nil, "dlq", "stats", "--management-url", "http://127.0.0.1:1/")
	if r.code != 1 || !strings.Contains(r.stderr, "rabbitmq_management") {
		t.Fatalf("stats with no management API: exit %d, want 1 and how to enable it\nstderr: %s", r.code, r.stderr)
	}
}

// An import --to a consumer's queue does not read that queue for an
// earlier import (it would hold the consumer's backlog), and says so.
func TestCLIImportToAConsumerQueueIsNotChecked(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 3))
	file := filepath.Join(t.TempDir(), "dead.jsonl")
	ok(t, "dlq", "export", "--queue", top.Consumer, "--output", file)
	for range 2 {
		r := ok(t, "dlq", "import", "--queue", top.Consumer, "--to", top.Consumer, "--yes", file)
		if !strings.Contains(r.stderr, "not a dead-letter queue: not checked for an earlier import") {
			t.Fatalf("import --to the consumer's queue did not say it was not checked:\n%s", r.stderr)
		}
	}
	if n := testenv.QueueDepth(t, ch, top.Consumer); n != 6 {
		t.Fatalf("the consumer's queue holds %d, want both imports' 3", n)
	}
}

// warren dlq failed on a DLQ holding a message whose headers amqp091-go
// refuses: ls, show, stats, export and purge read it now.
func TestCLIReadsMessagesWithUnreadableHeaders(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	bad := top.ExpireUnreadable(t, conn)
	for id := range bad {
		if ls := ok(t, "dlq", "ls", "--queue", top.Consumer).stdout; !strings.Contains(ls, id) {
			t.Errorf("ls does not list %s:\n%s", id, ls)
		}
		if show := ok(t, "dlq", "show", "--queue", top.Consumer, id).stdout; !strings.Contains(show, dlq.HeaderUnreadable) || !strings.Contains(show, bad[id].Reason) {
			t.Errorf("show %s:\n%s", id, show)
		}
	}
	ok(t, "dlq", "stats", "--queue", top.Consumer)
	if out := ok(t, "dlq", "export", "--queue", top.Consumer).stdout; strings.Count(out, dlq.HeaderUnreadable) != len(bad) {
		t.Errorf("export:\n%.2000s", out)
	}
	if res := decodeJSON[dlqtool.Result](t, ok(t, "dlq", "purge", "--queue", top.Consumer, "--yes", "--json").stdout); res.Done != len(bad) {
		t.Fatalf("purge purged %d, want %d", res.Done, len(bad))
	}
	testenv.WaitFor(t, 60*time.Second, "the DLQ empty", func() bool { return testenv.QueueDepth(t, ch, top.DLQ) == 0 })
}
