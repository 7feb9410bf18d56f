package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/examples/pipeline"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// The README's pipeline demo: it runs the whole pipeline and checks
// its own summary. A short run with unique names keeps it honest.
func TestDemoRunsAndChecksItself(t *testing.T) {
	var b [4]byte
	rand.Read(b[:])
	prefix := "wt_demo_" + hex.EncodeToString(b[:])
	getenv := map[string]string{
		"AMQP_URL": testenv.AMQPURL(t), "DATABASE_URL": testenv.DatabaseURL(t), "REDIS_URL": testenv.RedisURL(t),
	}
	t.Cleanup(func() {
		err := pipeline.Destroy(context.Background(), pipeline.Config{
			AMQPURL: getenv["AMQP_URL"], DatabaseURL: getenv["DATABASE_URL"], RedisURL: getenv["REDIS_URL"],
			Names: pipeline.NamesWithPrefix(prefix),
		})
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	var stdout, stderr bytes.Buffer
	// The broker as a flag: the closing hints pass it on, password masked.
	code := run(context.Background(), &stdout, &stderr, func(k string) string { return getenv[k] },
		[]string{"-items", "6", "-every", "1ms", "-prefix", prefix, "-amqp-url", getenv["AMQP_URL"]})
	if code != 0 {
		t.Fatalf("the demo exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	hintFlag := " --amqp-url " + amqpx.RedactURLs(getenv["AMQP_URL"]) + "\n"
	for _, want := range []string{"Nothing lost, nothing applied twice.", "✓ delivered to the webhook receiver", "dlq show --queue " + prefix + ".webhook" + hintFlag} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "✗") {
		t.Errorf("a check failed:\n%s", stdout.String())
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--items", "0"}, {"--prefix", "Bad-Name"}, {"--nope"}, {"--every", "0s"}, {"extra"}} {
		var out bytes.Buffer
		if code := run(context.Background(), &out, &out, func(string) string { return "" }, args); code != 2 {
			t.Errorf("%v exited %d, want 2\n%s", args, code, out.String())
		}
	}
}

// The closing hints run warren the way the user runs things, and carry the
// broker the user named with -amqp-url, password masked and said so.
func TestDemoHintsCarryTheUsersCommandAndURL(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	onPath := func(string) (string, error) { return "/usr/local/bin/warren", nil }
	notOnPath := func(string) (string, error) { return "", exec.ErrNotFound }
	has := func(names ...string) func(string) bool {
		return func(name string) bool { return slices.Contains(names, name) }
	}
	checkout := filepath.Join("cmd", "warren", "main.go")
	goRunSelf := "/tmp/go-build123/b001/exe/demo"
	for _, tc := range []struct {
		name, url, self string
		lookPath        func(string) (string, error)
		exists          func(string) bool
		want            hint
	}{
		{"go run in a checkout", "", goRunSelf, onPath, has(checkout), hint{command: "go run ./cmd/warren"}},
		{"built beside warren", "", filepath.Join(wd, "bin", "demo"), onPath, has(filepath.Join(wd, "bin", "warren")), hint{command: "./bin/warren"}},
		{"warren on PATH", "", "/opt/demo/demo", onPath, has(), hint{command: "warren"}},
		{"neither", "", "/opt/demo/demo", notOnPath, has(), hint{command: "go run github.com/warrenmq/warren/cmd/warren@latest"}},
		{"a URL with a password", "amqp://app:s3cret@mq.internal:5672/prod", goRunSelf, notOnPath, has(checkout),
			hint{command: "go run ./cmd/warren", flags: " --amqp-url amqp://app:xxxxx@mq.internal:5672/prod", masked: true}},
		{"a URL without one", "amqp://mq.internal/", goRunSelf, notOnPath, has(checkout), hint{command: "go run ./cmd/warren", flags: " --amqp-url amqp://mq.internal/"}},
		{"a URL the shell would split", "amqp://app:pw@mq/v?heartbeat=5&x=1", goRunSelf, notOnPath, has(checkout),
			hint{command: "go run ./cmd/warren", flags: " --amqp-url 'amqp://app:xxxxx@mq/v?heartbeat=5&x=1'", masked: true}},
	} {
		if got := warrenHint(tc.url, tc.self, tc.lookPath, tc.exists); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}

	var out bytes.Buffer
	h := warrenHint("amqp://app:s3cret@mq/", goRunSelf, notOnPath, has(checkout))
	h.withOutbox("postgres://app:pg-s3cret@db/app", "demo_outbox")
	if err := demoSummary(&out, demoResult{}, pipeline.Expect{}, 0, "demo.webhook", h, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  go run ./cmd/warren dlq show --queue demo.webhook --amqp-url amqp://app:xxxxx@mq/\n",
		"  go run ./cmd/warren dlq replay --queue demo.webhook --dry-run --amqp-url amqp://app:xxxxx@mq/\n",
		"  go run ./cmd/warren console --amqp-url amqp://app:xxxxx@mq/ --database-url postgres://app:xxxxx@db/app --table demo_outbox\n",
		"(passwords masked",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "s3cret") { // both passwords contain it
		t.Errorf("summary printed the password:\n%s", out.String())
	}
}
