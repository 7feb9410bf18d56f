package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/warrenmq/warren/examples/pipeline"
	"github.com/warrenmq/warren/internal/testenv"
)

// The README's first command: the demo runs the whole pipeline and checks
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
	code := run(context.Background(), &stdout, &stderr, func(k string) string { return getenv[k] },
		[]string{"-items", "6", "-every", "1ms", "-prefix", prefix})
	if code != 0 {
		t.Fatalf("the demo exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"Nothing lost, nothing applied twice.", "✓ delivered to the webhook receiver", "dlq show --queue " + prefix + ".webhook"} {
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
