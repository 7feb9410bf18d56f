package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// A typed value is never taken for something else, in either mode:
// "--batch-size 0" or "--max-attempts 0" would run with the defaults (the
// relay's config reads 0 as "default"), and "--mode poll --slot=" would
// accept a cdc flag; each is a usage error (exit 2).
func TestRelayRunTypedZeroOrEmptyIsAUsageError(t *testing.T) {
	t.Parallel()
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}[k]
	}}
	for _, args := range []string{"--mode cdc --batch-size 0", "--mode cdc --max-attempts 0", "--mode cdc --batch-size -1", "--batch-size 0", "--mode poll --workers 0", "--max-attempts 0", "--mode poll --slot=", "--mode poll --nack-timeout=0s"} {
		// Bounded: a relay that starts instead waits for its database until the context ends.
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		code := run(ctx, env, append([]string{"relay", "run"}, strings.Fields(args)...))
		cancel()
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (usage)", args, code)
		}
	}
}

// "--drop-slot" for a table with no slot (a typo) says nothing was there
// and exits non-zero, rather than claim it dropped the slot while the real
// group's slot goes on keeping WAL.
func TestDropSlotOfNothingSaysSoAndFails(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	table := testenv.Name(t, "typo")
	env := &cliEnv{stdout: &out, stderr: &errOut, getenv: func(k string) string {
		return map[string]string{"DATABASE_URL": testenv.DatabaseURL(t)}[k]
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, env, []string{"relay", "run", "--mode", "cdc", "--table", table, "--drop-slot"})
	if code == 0 || strings.Contains(out.String(), "dropped") || !strings.Contains(errOut.String(), "nothing dropped") {
		t.Errorf("--drop-slot of a table with no slot: exit %d, stdout %q, stderr %q; want non-zero and \"nothing dropped\"", code, out.String(), errOut.String())
	}
}
