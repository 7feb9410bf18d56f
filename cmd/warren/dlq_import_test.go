package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

// exportLine is one line of an export file holding p.
func exportLine(t *testing.T, p amqp.Publishing) []byte {
	t.Helper()
	line, err := dlqtool.Message{Publishing: p}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return append(line, '\n')
}

// jsonEventBody is a JSON event of about n bytes whose payload is full of
// quotes, as JSON inside JSON is: its export line escapes every one.
func jsonEventBody(id string, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"event_id":"` + id + `","event_type":"blob.created","data":[`)
	for b.Len() < n {
		b.WriteString(`"0123456789abcdef",`)
	}
	b.WriteString(`"end"]}`)
	return b.Bytes()
}

// peakRSS runs a warren command in a child process of its own (this
// package's tests built without the race detector, running
// TestPeakRSSChild) and returns its result and the peak resident set size
// of that process: its VmHWM, which counts its own memory only. (The
// rusage of a child started with exec would also count the test process,
// whose memory the child shared until the exec.) Built without the race
// detector, whose shadow memory is no part of the import's, so that the
// measurement means the same under `make test`, which runs with -race.
func peakRSS(t *testing.T, args ...string) (result, int64) {
	t.Helper()
	bin, err := buildPeakRSSChild()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestPeakRSSChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.AMQPURL(t), peakRSSArgs+"="+strings.Join(args, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child for warren %v: %v\n%s", args, err, stderr.String())
	}
	_, report, found := bytes.Cut(out, []byte(peakRSSMark))
	var child peakRSSReport
	if !found || json.NewDecoder(bytes.NewReader(report)).Decode(&child) != nil {
		t.Fatalf("child for warren %v wrote no report:\n%s\n%s", args, out, stderr.String())
	}
	return result{child.Stdout, child.Stderr, child.Code}, child.PeakBytes
}

// buildPeakRSSChild builds this package's tests, without the race
// detector, once per test process.
var buildPeakRSSChild = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "warren-peak.test")
	// go test puts its own GOROOT/bin first on PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(goTool, "test", "-c", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go test -c: %v\n%s", err, out)
	}
	return bin, nil
})

const (
	peakRSSArgs = "WARREN_TEST_PEAK_RSS_ARGS"
	peakRSSMark = "peak-rss-report:"
)

type peakRSSReport struct {
	Code           int
	Stdout, Stderr string
	PeakBytes      int64
}

// TestPeakRSSChild is peakRSS's child: it runs the command in process and
// reports how it ended and its VmHWM.
func TestPeakRSSChild(t *testing.T) {
	t.Parallel()
	args := os.Getenv(peakRSSArgs)
	if args == "" {
		t.Skip("the child process of peakRSS")
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), &cliEnv{stdout: &stdout, stderr: &stderr, getenv: os.Getenv}, strings.Split(args, "\x1f"))
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var kib int64
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	if kib == 0 || err != nil {
		t.Fatalf("no VmHWM in /proc/self/status: %v", err)
	}
	report, err := json.Marshal(peakRSSReport{code, stdout.String(), stderr.String(), kib << 10})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", peakRSSMark, report)
}

// A 40 MB line is imported one message at a time: the command's peak
// memory stays within three times the line (it was 218 MB, five times,
// when a line was held several times over and the whole file read before
// publishing). Above the default line cap it is refused, whole, with the
// flag that raises it named; with the flag it goes through intact.
func TestCLIImportStreamsALongLine(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	big := amqp.Publishing{MessageId: "big", Type: "blob.created", ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Body: jsonEventBody("big", 35<<20)}
	small := amqp.Publishing{MessageId: "small", Type: "blob.created", Body: []byte(`{"event_id":"small"}`)}
	bigLine := exportLine(t, big)
	if len(bigLine) < 40_000_000 {
		t.Fatalf("the long line is %d bytes, want at least 40 MB", len(bigLine))
	}
	file := filepath.Join(t.TempDir(), "long.jsonl")
	if err := os.WriteFile(file, bytes.Join([][]byte{exportLine(t, small), bigLine, exportLine(t, small)}, nil), 0o600); err != nil {
		t.Fatal(err)
	}

	// Over the default cap: refused whole, nothing published, the flag named.
	r := runWarren(t, nil, "dlq", "import", "--queue", top.Consumer, "--yes", file)
	if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != 1 || !strings.Contains(first, "line 2") || !strings.Contains(first, "--max-line-bytes") {
		t.Fatalf("import of a line over the default cap: exit %d, stderr %q; want 1 naming line 2 and --max-line-bytes", r.code, r.stderr)
	}
	if n := len(testenv.Drain(t, conn, top.DLQ)); n != 0 {
		t.Fatalf("a refused file published %d messages, want none", n)
	}

	r, peak := peakRSS(t, "dlq", "import", "--queue", top.Consumer, "--yes", "--max-line-bytes", "64MiB", file)
	t.Logf("import of a %d-byte line: peak RSS %d bytes (%.1f× the line)", len(bigLine), peak, float64(peak)/float64(len(bigLine)))
	if r.code != 0 || !strings.Contains(r.stdout, "imported 3 of 3") {
		t.Fatalf("import: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if limit := 3 * int64(len(bigLine)); peak > limit {
		t.Errorf("peak RSS %d bytes importing a %d-byte line; want at most %d (three times the line)", peak, len(bigLine), limit)
	}
	got := testenv.Drain(t, conn, top.DLQ)
	if len(got) != 3 || got[1].MessageId != "big" || !bytes.Equal(got[1].Body, big.Body) {
		t.Fatalf("imported %d messages; want small, big (its body intact), small", len(got))
	}
}

// An import whose file holds a message the broker refuses (here an
// expiration that is not a number of milliseconds) publishes nothing and
// names the line, instead of stopping after the messages before it.
func TestCLIImportRefusesWhatTheBrokerRefusesBeforePublishing(t *testing.T) {
	t.Parallel()
	_, ch, top := testenv.NewDeadLetterTopology(t)
	var file []byte
	for _, p := range []amqp.Publishing{
		{MessageId: "ok-1", Body: []byte(`{"event_id":"ok-1"}`)},
		{MessageId: "ok-2", Body: []byte(`{"event_id":"ok-2"}`)},
		{MessageId: "bad", Expiration: "soon", Body: []byte(`{"event_id":"bad"}`)},
	} {
		file = append(file, exportLine(t, p)...)
	}
	path := filepath.Join(t.TempDir(), "dead.jsonl")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runWarren(t, nil, "dlq", "import", "--queue", top.Consumer, "--yes", path)
	if r.code != 1 || !strings.Contains(r.stderr, "line 3") || !strings.Contains(r.stderr, "refuses") {
		t.Errorf("import: exit %d, want 1 naming line 3 and the refusal\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := testenv.QueueDepth(t, ch, top.DLQ); n != 0 {
		t.Errorf("the DLQ holds %d messages: the import stopped part way", n)
	}
}
