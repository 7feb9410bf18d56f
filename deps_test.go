package warren_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestPackageBoundaries holds each package to its audience by what it
// links: a service that only writes events must not link the AMQP client,
// a consumer must not link the operator's DLQ tools, and the shipped
// command must not link example code. An entry naming a package that does
// not exist yet passes: it only asserts absence.
func TestPackageBoundaries(t *testing.T) {
	for _, b := range []struct {
		pkg, forbidden string // forbidden matches an import path or, ending in "/", a path prefix
		why            string
	}{
		{"github.com/warrenmq/warren/outbox", "github.com/rabbitmq/amqp091-go", "a producer writes rows; only the relay talks to the broker"},
		{"github.com/warrenmq/warren/outbox", "github.com/jackc/pglogrepl", "a producer writes rows; only the CDC relay reads the replication stream"},
		{"github.com/warrenmq/warren/outbox/outboxtest", "github.com/rabbitmq/amqp091-go", "a producer's tests need no broker"},
		{"github.com/warrenmq/warren/consumer", "github.com/warrenmq/warren/dlqtool", "a consumer needs the dead-letter protocol, not the operator's tools"},
		{"github.com/warrenmq/warren/cmd/warren", "github.com/warrenmq/warren/examples/", "the shipped binary does not link example code"},
	} {
		t.Run(b.pkg, func(t *testing.T) {
			// go test puts its own go first on PATH.
			out, err := exec.Command("go", "list", "-deps", b.pkg).Output()
			if err != nil {
				var stderr []byte
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					stderr = ee.Stderr
				}
				t.Fatalf("go list -deps %s: %v\n%s", b.pkg, err, stderr)
			}
			for _, dep := range strings.Fields(string(out)) {
				if dep == strings.TrimSuffix(b.forbidden, "/") || strings.HasSuffix(b.forbidden, "/") && strings.HasPrefix(dep, b.forbidden) {
					t.Errorf("%s depends on %s: %s", b.pkg, dep, b.why)
				}
			}
		})
	}
}

// TestGoModHoldsNoTestTools keeps test-only tools out of the library's
// go.mod, whose requirements every importer's module graph, SBOM and
// dependency alerts take in: the console's browser tests are a module of
// their own (cmd/warren/internal/console/browsertest), spans are recorded
// with internal/testenv/spanrecorder and pseudo-terminals opened with
// testenv.OpenPTY.
func TestGoModHoldsNoTestTools(t *testing.T) {
	out, err := exec.Command("go", "mod", "edit", "-json").Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	for _, r := range mod.Require {
		for _, tool := range []string{"github.com/chromedp/", "github.com/creack/pty", "go.opentelemetry.io/otel/sdk", "github.com/go-json-experiment/"} {
			if strings.HasPrefix(r.Path, tool) {
				t.Errorf("go.mod requires %s, a test tool, which every importer would inherit", r.Path)
			}
		}
	}
}
