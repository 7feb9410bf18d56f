package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	warrenpkg "github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
)

// runOutboxBin runs the built binary with environ added to its
// environment, stdin empty (so never a terminal).
func runOutboxBin(t *testing.T, environ map[string]string, args ...string) result {
	t.Helper()
	cmd := warrenCmd(t, nil, args...)
	for _, k := range slices.Sorted(maps.Keys(environ)) {
		cmd.Env = append(cmd.Env, k+"="+environ[k])
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// deadRowsTable is a migrated outbox table holding n dead rows (type
// workitem.created, the last one label.deleted), each with errText as its
// last error, and two delivered rows, all finished two hours ago.
func deadRowsTable(t *testing.T, n int, errText string) (map[string]string, func(where string) int) {
	t.Helper()
	environ, ob, pool := outboxCLITable(t)
	var evs []warrenpkg.Event
	for i := range n + 2 {
		typ := "workitem.created"
		if i == n-1 {
			typ = "label.deleted"
		}
		evs = append(evs, warrenpkg.Event{ID: fmt.Sprintf("ev-%03d", i), Type: typ})
	}
	outboxCLIPublish(t, pool, ob, evs...)
	outboxCLIExec(t, pool, ob, fmt.Sprintf(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now() - interval '2 hours',
		last_error = '%s' WHERE event_id < 'ev-%03d'`, errText, n))
	outboxCLIExec(t, pool, ob, fmt.Sprintf(`UPDATE {table} SET state = 'delivered', finished_at = now() - interval '2 hours' WHERE event_id >= 'ev-%03d'`, n))
	return environ, func(where string) int { return outboxCLICount(t, pool, ob, where) }
}

// redrive and purge change rows only with --yes (no terminal to ask on);
// --dry-run says how many rows they would touch and changes nothing;
// --json prints the result for scripts.
func TestOutboxCLIRedriveAndPurgeConfirm(t *testing.T) {
	t.Parallel()
	environ, count := deadRowsTable(t, 3, "broker said no")

	for _, args := range [][]string{{"redrive", "--all"}, {"purge", "--older-than", "1h"}} {
		r := runOutboxBin(t, environ, append([]string{"outbox"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "pass --yes to confirm") {
			t.Errorf("%v without --yes: exit %d, want 2 asking for --yes\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if n := count("state = 'dead'"); n != 3 {
		t.Fatalf("%d dead rows left of 3 after refused commands", n)
	}

	r := runOutboxBin(t, environ, "outbox", "redrive", "--all", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "would redrive 3 dead rows") {
		t.Errorf("redrive --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runOutboxBin(t, environ, "outbox", "purge", "--older-than", "1h", "--state", "delivered", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "would purge 2 finished rows") {
		t.Errorf("purge --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	dry := decodeJSON[outboxChangeJSON](t, runOutboxBin(t, environ, "outbox", "purge", "--older-than", "1h", "--dry-run", "--json").stdout)
	if !dry.DryRun || dry.Matched != 5 || dry.Changed != 0 {
		t.Errorf("purge --dry-run --json: %+v, want 5 matched, none changed", dry)
	}
	if n := count("state = 'dead'") + count("state = 'delivered'"); n != 5 {
		t.Fatalf("dry runs changed rows: %d finished rows left of 5", n)
	}

	r = runOutboxBin(t, environ, "outbox", "redrive", "--type", "label.", "--yes", "--json")
	if got := decodeJSON[outboxChangeJSON](t, r.stdout); r.code != 0 || got.DryRun || got.Matched != 1 || got.Changed != 1 {
		t.Errorf("redrive --json: exit %d, %+v\n%s", r.code, got, r.stderr)
	}
	r = runOutboxBin(t, environ, "outbox", "purge", "--older-than", "1h", "--yes", "--json")
	if got := decodeJSON[outboxChangeJSON](t, r.stdout); r.code != 0 || got.Matched != 4 || got.Changed != 4 {
		t.Errorf("purge --json: exit %d, %+v\n%s", r.code, got, r.stderr)
	}
	if n := count("true"); n != 1 || count("state = 'pending'") != 1 {
		t.Errorf("%d rows left, want the redriven one, pending", n)
	}
}

// A listing cut by --limit says so and how many match; piped, no column is
// cut; --json lists every row.
func TestOutboxCLIDeadSaysWhatItCut(t *testing.T) {
	t.Parallel()
	longErr := "publish failed: " + strings.Repeat("the broker refused the message again ", 5) + "END"
	environ, _ := deadRowsTable(t, 25, longErr)
	r := runOutboxBin(t, environ, "outbox", "dead")
	if r.code != 0 || strings.Count(r.stdout, "ev-0") != 20 || !strings.Contains(r.stdout, "showing 20 of 25; ") {
		t.Fatalf("dead: exit %d, want 20 rows and 'showing 20 of 25'\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Count(r.stdout, longErr) != 20 {
		t.Errorf("dead cut the error column though stdout is not a terminal:\n%s", r.stdout)
	}
	if r := runOutboxBin(t, environ, "outbox", "dead", "--limit", "0"); r.code != 0 || strings.Contains(r.stdout, "showing") {
		t.Errorf("dead --limit 0: exit %d, want every row and no 'showing'\n%s%s", r.code, r.stdout, r.stderr)
	}
	rows := decodeJSON[[]outboxRowJSON](t, runOutboxBin(t, environ, "outbox", "dead", "--json").stdout)
	if len(rows) != 25 || rows[0].LastError != longErr {
		t.Errorf("dead --json: %d rows, want 25 with whole errors", len(rows))
	}
}

// Human output starts with the database and table it read, the password
// masked; --json does not.
func TestOutboxCLINamesTheDatabase(t *testing.T) {
	t.Parallel()
	environ, _ := deadRowsTable(t, 1, "x")
	const secret = "s3cret-pw-for-the-test"
	u := strings.Replace(environ["DATABASE_URL"], "postgres@", "postgres:"+secret+"@", 1)
	if u == environ["DATABASE_URL"] {
		t.Skipf("cannot put a password into %s", environ["DATABASE_URL"])
	}
	environ["DATABASE_URL"] = u
	want := fmt.Sprintf("database %s, table %s\n", strings.Replace(u, secret, "xxxxx", 1), environ["WARREN_OUTBOX_TABLE"])
	for _, args := range [][]string{{"migrate"}, {"stats"}, {"dead"}, {"redrive", "--all", "--dry-run"}, {"purge", "--older-than", "1h", "--dry-run"}} {
		r := runOutboxBin(t, environ, append([]string{"outbox"}, args...)...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, want) {
			t.Errorf("%v: exit %d, want the first line %q\n%s%s", args, r.code, want, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%v printed the password:\n%s%s", args, r.stdout, r.stderr)
		}
	}
	if r := runOutboxBin(t, environ, "outbox", "stats", "--json"); r.code != 0 || !strings.HasPrefix(r.stdout, "{") {
		t.Errorf("stats --json: exit %d, want JSON only\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Every verb on a table that does not exist says so and what to run,
// instead of Postgres's raw error.
func TestOutboxCLIMissingTable(t *testing.T) {
	t.Parallel()
	table := testenv.Name(t, "nosuch")
	environ := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE": table}
	want := "table " + table + " does not exist in "
	for _, args := range [][]string{{"stats"}, {"stats", "--json"}, {"dead"}, {"redrive", "--all", "--dry-run"}, {"redrive", "--all", "--yes"}, {"purge", "--older-than", "1h", "--dry-run"}} {
		r := runOutboxBin(t, environ, append([]string{"outbox"}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "run 'warren outbox migrate'") || strings.Contains(r.stderr, "SQLSTATE") {
			t.Errorf("%v: exit %d, want 1 with %q...run 'warren outbox migrate'\n%s%s", args, r.code, want, r.stdout, r.stderr)
		}
	}
}

// A malformed URL is a usage error (exit 2) for outbox and relay, from a
// flag or the environment, and its password is not printed.
func TestOutboxCLIMalformedURL(t *testing.T) {
	t.Parallel()
	const secret = "pw-in-a-bad-url"
	db := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE": testenv.Name(t, "ob")}
	for _, c := range []struct {
		env  map[string]string
		args []string
	}{
		{db, []string{"outbox", "stats", "--database-url", "postgres://app:" + secret + "@127.0.0.1:notaport/x"}},
		{map[string]string{"DATABASE_URL": "postgres://app:" + secret + "%zz@127.0.0.1/x"}, []string{"outbox", "dead"}},
		{db, []string{"outbox", "migrate", "--database-url", "host=127.0.0.1 port=x password=" + secret}},
		{db, []string{"relay", "run", "--database-url", "postgres://app:" + secret + "@127.0.0.1:notaport/x"}},
		{db, []string{"relay", "run", "--amqp-url", "amqp://guest:" + secret + "@127.0.0.1:notaport/"}},
		{db, []string{"relay", "run", "--amqp-url", "http://127.0.0.1/"}},
		{db, []string{"relay", "run", "--mode", "cdc", "--amqp-url", "amqp://guest:" + secret + "%zz@127.0.0.1/"}},
	} {
		r := runOutboxBin(t, c.env, c.args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s%s", c.args, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%v printed the password:\n%s%s", c.args, r.stdout, r.stderr)
		}
	}
}

// On a terminal, redrive says how many rows it will change before it asks,
// and changes nothing unless the answer is yes.
func TestOutboxCLIRedriveAsksOnATerminal(t *testing.T) {
	// Serial: replaces the package's dlqStdin and isTerminal, which every
	// in-process run reads.
	environ, count := deadRowsTable(t, 3, "broker said no")
	oldStdin, oldIsTerminal := dlqStdin, isTerminal
	t.Cleanup(func() { dlqStdin, isTerminal = oldStdin, oldIsTerminal })
	isTerminal = func(any) bool { return true }
	question := fmt.Sprintf("redrive 3 dead rows of outbox %s? [y/N]", environ["WARREN_OUTBOX_TABLE"])
	for _, answer := range []string{"n\n", "\n", "y\n"} {
		dlqStdin = strings.NewReader(answer)
		r := runOutboxCLI(t.Context(), environ, "outbox", "redrive", "--all")
		if !strings.Contains(r.stderr, question) {
			t.Errorf("answer %q: the question is not %q\n%s%s", answer, question, r.stdout, r.stderr)
		}
		want, dead := 1, 3
		if answer == "y\n" {
			want, dead = 0, 0
		}
		if r.code != want || count("state = 'dead'") != dead {
			t.Errorf("answer %q: exit %d and %d dead rows, want %d and %d\n%s%s", answer, r.code, count("state = 'dead'"), want, dead, r.stdout, r.stderr)
		}
	}
}

// A confirmed redrive changes exactly the rows the question counted: a row
// that dies while the question waits stays dead until it is asked about,
// though it is older than the counted ones (a redrive by count, oldest
// first, took it in place of one redriven meanwhile by someone else).
func TestOutboxCLIRedriveActsOnExactlyWhatWasConfirmed(t *testing.T) {
	// Serial: replaces the package's dlqStdin and isTerminal, which every
	// in-process run reads.
	environ, ob, pool := outboxCLITable(t)
	var evs []warrenpkg.Event
	for i := range 4 {
		evs = append(evs, warrenpkg.Event{ID: fmt.Sprintf("ev-%03d", i), Type: "workitem.created"})
	}
	outboxCLIPublish(t, pool, ob, evs...)
	outboxCLIExec(t, pool, ob, `UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(), last_error = 'no route' WHERE event_id > 'ev-000'`)

	oldStdin, oldIsTerminal := dlqStdin, isTerminal
	t.Cleanup(func() { dlqStdin, isTerminal = oldStdin, oldIsTerminal })
	isTerminal = func(any) bool { return true }
	dlqStdin = &answerAfter{
		arrive: func() {
			outboxCLIExec(t, pool, ob, `UPDATE {table} SET state = 'pending', attempts = 0, finished_at = NULL WHERE event_id = 'ev-001'`)
			outboxCLIExec(t, pool, ob, `UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(), last_error = 'no route' WHERE event_id = 'ev-000'`)
		},
		answer: strings.NewReader("y\n"),
	}
	r := runOutboxCLI(t.Context(), environ, "outbox", "redrive", "--all")
	if r.code != 0 || !strings.Contains(r.stderr, "redrive 3 dead rows") || !strings.Contains(r.stdout, "redrove 2 dead rows") ||
		!strings.Contains(r.stdout, "1 of the dead rows counted were no longer dead") {
		t.Fatalf("confirmed redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := outboxCLICount(t, pool, ob, "state = 'dead'"); n != 1 {
		t.Fatalf("%d rows dead after redriving the 2 confirmed still dead, want the one that died meanwhile", n)
	}
	if n := outboxCLICount(t, pool, ob, "state = 'dead' AND event_id = 'ev-000'"); n != 1 {
		t.Fatal("the row that died while the question waited was redriven, and a counted one left dead")
	}
}
