package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	warrenpkg "github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// outboxCLIResult is what one in-process run of the command produced.
type outboxCLIResult struct {
	stdout, stderr string
	code           int
}

// runOutboxCLI runs the command in process with the given environment.
func runOutboxCLI(ctx context.Context, environ map[string]string, args ...string) outboxCLIResult {
	var stdout, stderr bytes.Buffer
	env := &cliEnv{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return environ[k] }}
	code := run(ctx, env, args)
	return outboxCLIResult{stdout.String(), stderr.String(), code}
}

// outboxCLITable creates a migrated outbox table for the test through the
// command itself and returns its environment and a pool on it.
func outboxCLITable(t *testing.T) (map[string]string, *outbox.Table, *pgxpool.Pool) {
	t.Helper()
	table := testenv.Name(t, "ob")
	testenv.DropTables(t, table, table+"_migrations")
	environ := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE": table, "AMQP_URL": testenv.AMQPURL(t)}
	r := runOutboxCLI(context.Background(), environ, "outbox", "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("migrated from schema version 0 to %d", outbox.SchemaVersion())) {
		t.Fatalf("outbox migrate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	ob, err := outbox.New(table)
	if err != nil {
		t.Fatal(err)
	}
	return environ, ob, testenv.PgPool(t)
}

func outboxCLIPublish(t *testing.T, pool *pgxpool.Pool, ob *outbox.Table, evs ...warrenpkg.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := ob.PublishBatch(ctx, tx, evs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func outboxCLIExec(t *testing.T, pool *pgxpool.Pool, ob *outbox.Table, sql string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), strings.ReplaceAll(sql, "{table}", fmt.Sprintf("%q", ob.Name()))); err != nil {
		t.Fatal(err)
	}
}

func outboxCLICount(t *testing.T, pool *pgxpool.Pool, ob *outbox.Table, where string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), fmt.Sprintf("SELECT count(*) FROM %q WHERE %s", ob.Name(), where)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOutboxCLIOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	environ, ob, pool := outboxCLITable(t)
	if r := runOutboxCLI(ctx, environ, "outbox", "migrate"); r.code != 0 || !strings.Contains(r.stdout, "up to date") {
		t.Fatalf("second migrate: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	var evs []warrenpkg.Event
	for i, typ := range []string{"workitem.created", "workitem.updated", "label.deleted", "workitem.deleted", "state.created", "state.updated"} {
		evs = append(evs, warrenpkg.Event{ID: fmt.Sprintf("ev-%d", i), Type: typ, EntityID: fmt.Sprintf("e%d", i), Payload: warrenpkg.Payload{Data: json.RawMessage(`{"n":1}`)}})
	}
	outboxCLIPublish(t, pool, ob, evs...)
	outboxCLIExec(t, pool, ob, `UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now() - interval '2 hours',
		last_error = E'broker said no\x1b[31m' WHERE event_id IN ('ev-0', 'ev-1', 'ev-2')`)
	outboxCLIExec(t, pool, ob, `UPDATE {table} SET state = 'delivered', finished_at = now() - interval '2 hours' WHERE event_id = 'ev-3'`)

	r := runOutboxCLI(ctx, environ, "outbox", "stats", "--json")
	var stats outboxStatsJSON
	if err := json.Unmarshal([]byte(r.stdout), &stats); r.code != 0 || err != nil {
		t.Fatalf("stats --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if stats.Pending != 2 || stats.Dead != 3 || stats.Delivered != 1 || stats.Table != ob.Name() {
		t.Errorf("stats %+v", stats)
	}
	if r := runOutboxCLI(ctx, environ, "outbox", "stats"); r.code != 0 || !strings.Contains(r.stdout, "dead              3") {
		t.Errorf("stats: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = runOutboxCLI(ctx, environ, "outbox", "dead", "--type", "workitem.")
	if r.code != 0 || !strings.Contains(r.stdout, "ev-0") || !strings.Contains(r.stdout, "ev-1") || strings.Contains(r.stdout, "ev-2") {
		t.Errorf("dead --type workitem.: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "\x1b") {
		t.Errorf("dead printed a raw escape sequence from the error text:\n%q", r.stdout)
	}
	r = runOutboxCLI(ctx, environ, "outbox", "dead", "--json", "--type", "label.,workitem.")
	var rows []outboxRowJSON
	if err := json.Unmarshal([]byte(r.stdout), &rows); r.code != 0 || err != nil || len(rows) != 3 {
		t.Fatalf("dead --json: exit %d, %v, %d rows\n%s%s", r.code, err, len(rows), r.stdout, r.stderr)
	}
	for i, row := range rows {
		ev, err := warrenpkg.DecodeEvent(row.Event)
		if err != nil || ev.ID != fmt.Sprintf("ev-%d", i) || row.State != outbox.Dead || row.Attempts != 20 {
			t.Errorf("dead --json row %d: %+v (%v)", i, row, err)
		}
	}

	if r := runOutboxCLI(ctx, environ, "outbox", "redrive", "--type", "label.", "--yes"); r.code != 0 || !strings.Contains(r.stdout, "redrove 1 dead rows") {
		t.Errorf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := outboxCLICount(t, pool, ob, "event_id = 'ev-2' AND state = 'pending' AND attempts = 0"); n != 1 {
		t.Error("the redriven row is not pending")
	}

	// An archive that cannot be written keeps every row.
	r = runOutboxCLI(ctx, environ, "outbox", "purge", "--older-than", "1h", "--archive", "/dev/full", "--yes")
	if r.code != 1 || !strings.Contains(r.stderr, "archive failed") {
		t.Errorf("purge into /dev/full: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := outboxCLICount(t, pool, ob, "true"); n != 6 {
		t.Fatalf("a failed archive deleted %d rows", 6-n)
	}

	archive := filepath.Join(t.TempDir(), "archive.jsonl")
	r = runOutboxCLI(ctx, environ, "outbox", "purge", "--older-than", "1h", "--archive", archive, "--batch", "1", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "purged 3 rows") {
		t.Fatalf("purge: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		var row outboxRowJSON
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil || row.FinishedAt == nil {
			t.Errorf("archive line %q: %v", sc.Text(), err)
		}
	}
	if lines != 3 || outboxCLICount(t, pool, ob, "true") != 3 {
		t.Errorf("archived %d lines; %d rows left, want 3 and 3", lines, outboxCLICount(t, pool, ob, "true"))
	}
}

func TestOutboxCLIBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	environ := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t)}
	for _, args := range [][]string{
		{"outbox"},
		{"outbox", "vacuum"},
		{"outbox", "stats", "--table", "Bad-Name"},
		{"outbox", "stats", "extra-argument"},
		{"outbox", "redrive"},
		{"outbox", "redrive", "--all", "--type", "x."},
		{"outbox", "dead", "--limit", "-1"},
		{"outbox", "purge", "--yes"},
		{"outbox", "purge", "--older-than", "7d", "--state", "pending", "--yes"},
		{"outbox", "purge", "--older-than", "-1h", "--yes"},
		{"relay"},
		{"relay", "walk"},
		{"relay", "run", "--batch-size", "-5"},
		{"relay", "run", "--lease", "1s", "--publish-timeout", "5s"},
		{"relay", "run", "--exchange", "amq.direct"},
	} {
		if r := runOutboxCLI(ctx, environ, args...); r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Errorf("warren %s: exit %d, want 2 with a short message\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	for _, args := range [][]string{{"outbox", "--help"}, {"outbox", "purge", "--help"}, {"relay", "--help"}, {"relay", "run", "--help"}} {
		if r := runOutboxCLI(ctx, environ, args...); r.code != 0 || !strings.Contains(r.stdout, "Usage: warren") {
			t.Errorf("warren %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stdout)
		}
	}
}

// Database passwords appear in no output, whatever fails.
func TestOutboxCLIRedactsPasswords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const secret = "hunter2hunter2"
	for _, c := range []struct {
		args []string
		url  string
	}{
		{[]string{"outbox", "stats"}, "postgres://app:" + secret + "@127.0.0.1:1/x?connect_timeout=2"},
		{[]string{"outbox", "stats"}, "postgres://app:" + secret + "@127.0.0.1:notaport/x"},
		{[]string{"outbox", "migrate"}, "host=127.0.0.1 port=1 user=app password=" + secret + " connect_timeout=2"},
		{[]string{"relay", "run", "--migrate"}, "postgres://app:" + secret + "@127.0.0.1:1/x?connect_timeout=2"},
		{[]string{"relay", "run"}, "postgres://app:" + secret + "@127.0.0.1:notaport/x"},
	} {
		r := runOutboxCLI(ctx, map[string]string{"DATABASE_URL": c.url}, c.args...)
		if r.code == 0 {
			t.Errorf("%v with %s succeeded", c.args, c.url)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%v printed the password:\n%s%s", c.args, r.stdout, r.stderr)
		}
	}
}

// 'warren relay run' relays committed events and exits 0 when stopped.
func TestRelayRunCLI(t *testing.T) {
	t.Parallel()
	environ, ob, pool := outboxCLITable(t)
	exchange, queue := testenv.Name(t, "ex"), testenv.Name(t, "q")
	testenv.CleanupExchanges(t, exchange)
	testenv.CleanupQueues(t, queue)
	ch := testenv.Channel(t)
	// Declared as the relay declares it, so its own declaration is a no-op.
	if err := ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	var evs []warrenpkg.Event
	for i := range 20 {
		evs = append(evs, warrenpkg.Event{ID: fmt.Sprintf("ev-%d", i), Type: "workitem.created"})
	}
	outboxCLIPublish(t, pool, ob, evs...)

	environ["WARREN_EXCHANGE"] = exchange
	name := testenv.Name(t, "relay")
	ctx, cancel := context.WithCancel(context.Background())
	var r outboxCLIResult
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		r = runOutboxCLI(ctx, environ, "relay", "run", "--migrate", "--name", name)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	// A row is deleted only after the broker confirmed its message; a
	// publish that timed out may have arrived too (at least once).
	testenv.WaitFor(t, 60*time.Second, "every row relayed", func() bool { return outboxCLICount(t, pool, ob, "true") == 0 })
	if n := testenv.QueueDepth(t, ch, queue); n < 20 {
		t.Errorf("%d events in the queue, want at least 20", n)
	}
	cancel() // what SIGTERM does to the command's context
	<-finished
	if r.code != 0 || !strings.Contains(r.stderr, "relay stopped") || !strings.Contains(r.stdout, fmt.Sprintf("schema version %d", outbox.SchemaVersion())) {
		t.Fatalf("relay run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := outboxCLICount(t, pool, ob, "true"); n != 0 {
		t.Errorf("%d rows left after relaying", n)
	}
}

// capture prints the SQL without applying it, installs once, is a no-op
// the second time, and under --on-failure record a refused event shows in
// stats as a capture error.
func TestOutboxCLICapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	environ, ob, pool := outboxCLITable(t)
	source := testenv.Name(t, "src")
	testenv.DropTables(t, source, ob.CaptureErrorsTable())
	t.Cleanup(func() {
		pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+source+`_warren_capture() CASCADE`)
		pool.Exec(context.Background(), `DELETE FROM warren_capture_migrations WHERE name = $1`, "public."+source)
	})
	if _, err := pool.Exec(ctx, `CREATE TABLE `+source+` (id text PRIMARY KEY, name text, body text, deleted_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	args := []string{"outbox", "capture", "--source", source, "--entity-type", "issue", "--event-prefix", "workitem", "--exclude", "body"}

	r := runOutboxCLI(ctx, environ, append(args, "--print")...)
	if r.code != 0 || !strings.Contains(r.stdout, "CREATE OR REPLACE FUNCTION") || !strings.Contains(r.stdout, "'workitem.updated'") ||
		!strings.Contains(r.stdout, "tracked columns: id, name, deleted_at") {
		t.Fatalf("capture --print: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The script applies in one transaction, holding the table's lock.
	lock := "LOCK TABLE " + pgx.Identifier{"public", source}.Sanitize() + " IN SHARE ROW EXCLUSIVE MODE;\n"
	if !strings.HasPrefix(r.stdout, "BEGIN;\nSET LOCAL lock_timeout = '5000ms';\n"+lock) || !strings.HasSuffix(r.stdout, "COMMIT;\n") {
		t.Fatalf("capture --print is not wrapped in a transaction holding the table's lock:\n%s", r.stdout)
	}
	r = runOutboxCLI(ctx, environ, append(args, "--print", "--subscriber", "skip")...)
	if r.code != 0 || !strings.Contains(r.stdout, "subscriber: skip") {
		t.Fatalf("capture --print --subscriber skip: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runOutboxCLI(ctx, environ, append(args, "--subscriber", "ignore")...); r.code != 2 || !strings.Contains(r.stderr, "--subscriber must be refuse, capture or skip") {
		t.Fatalf("capture --subscriber ignore: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+source+` VALUES ('a', 'x', 'y')`); err != nil {
		t.Fatal(err)
	}
	if n := outboxCLICount(t, pool, ob, "true"); n != 0 {
		t.Fatalf("--print applied the capture: %d events", n)
	}

	record := append(args, "--on-failure", "record")
	r = runOutboxCLI(ctx, environ, record...)
	if r.code != 0 || !strings.Contains(r.stdout, "installed: version 1") {
		t.Fatalf("capture: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runOutboxCLI(ctx, environ, record...)
	if r.code != 0 || !strings.Contains(r.stdout, "up to date (version 1)") {
		t.Fatalf("capture again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A dropped trigger is put back, though the SQL is unchanged, and the
	// command says why.
	if _, err := pool.Exec(ctx, `DROP TRIGGER warren_capture_update ON `+source); err != nil {
		t.Fatal(err)
	}
	r = runOutboxCLI(ctx, environ, record...)
	if r.code != 0 || !strings.Contains(r.stdout, "reinstalled: version 2") || !strings.Contains(r.stdout, "trigger warren_capture_update is missing") {
		t.Fatalf("capture after DROP TRIGGER: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+source+` SET name = 'z'`); err != nil {
		t.Fatal(err)
	}
	if n := outboxCLICount(t, pool, ob, "event_type = 'workitem.updated' AND entity_id = 'a'"); n != 1 {
		t.Fatalf("update wrote %d events, want 1", n)
	}
	outboxCLIExec(t, pool, ob, `ALTER TABLE {table} ADD CONSTRAINT poison CHECK (entity_id <> 'a') NOT VALID`)
	if _, err := pool.Exec(ctx, `UPDATE `+source+` SET name = 'w'`); err != nil {
		t.Fatalf("under record the update must succeed: %v", err)
	}
	r = runOutboxCLI(ctx, environ, "outbox", "stats", "--json")
	var stats outboxStatsJSON
	if err := json.Unmarshal([]byte(r.stdout), &stats); r.code != 0 || err != nil || stats.CaptureErrors != 1 {
		t.Fatalf("stats --json: exit %d, %v, capture errors %d\n%s%s", r.code, err, stats.CaptureErrors, r.stdout, r.stderr)
	}
	if r := runOutboxCLI(ctx, environ, "outbox", "stats"); r.code != 0 || !strings.Contains(r.stdout, "capture errors    1") {
		t.Errorf("stats: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = runOutboxCLI(ctx, environ, "outbox", "capture", "--source", source, "--uninstall")
	if r.code != 0 || !strings.Contains(r.stdout, "uninstalled (version 3)") {
		t.Fatalf("capture --uninstall: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// With WARREN_SCHEMA=plane (set for the relay and the other
	// commands) capture is refused, naming the flag that lets it run.
	plane := maps.Clone(environ)
	plane["WARREN_SCHEMA"] = "plane"
	if r := runOutboxCLI(ctx, plane, args...); r.code != 2 || !strings.Contains(r.stderr, "pass --schema warren") {
		t.Errorf("capture with WARREN_SCHEMA=plane: exit %d, want 2 naming --schema warren\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runOutboxCLI(ctx, plane, append(args, "--schema", "warren", "--print")...); r.code != 0 {
		t.Errorf("capture --schema warren with WARREN_SCHEMA=plane: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	for _, bad := range [][]string{
		{"outbox", "capture"},
		{"outbox", "capture", "--source", source, "--on-failure", "ignore"},
		{"outbox", "capture", "--source", source, "--exclude", "nope"},
		{"outbox", "capture", "--source", source, "--print", "--uninstall"},
	} {
		if r := runOutboxCLI(ctx, environ, bad...); r.code != 2 || r.stderr == "" {
			t.Errorf("%v: exit %d, want 2 with a message\n%s%s", bad, r.code, r.stdout, r.stderr)
		}
	}
}

// 'warren outbox --schema plane' on Plane's own table: stats count its
// states, lapsed claims included; dead and redrive say they need the
// migration (exit 1) until 'migrate --schema plane' adds warren's columns,
// then list and redrive dead rows; purge is refused (Plane's cleaner's
// job), and no row is deleted.
func TestOutboxCLIPlaneSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testenv.NewPlaneTable(t, true)
	environ := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE": p.Name, "WARREN_SCHEMA": "plane"}
	ids := p.Insert(5)
	p.Exec(`UPDATE {table} SET claimed_at = now() - interval '2 days' WHERE event_id = ANY($1::uuid[])`, ids[:2])
	p.Exec(`UPDATE {table} SET claimed_at = now(), processed_at = now() WHERE event_id = $1::uuid`, ids[2])

	r := runOutboxCLI(ctx, environ, "outbox", "stats", "--json")
	var stats outboxStatsJSON
	if err := json.Unmarshal([]byte(r.stdout), &stats); r.code != 0 || err != nil {
		t.Fatalf("stats --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if !reflect.DeepEqual(stats, outboxStatsJSON{Table: p.Name, Schema: "plane", Pending: 4, Lapsed: 2, Delivered: 1, OldestPendingAgeSeconds: stats.OldestPendingAgeSeconds}) {
		t.Errorf("stats %+v", stats)
	}
	if r := runOutboxCLI(ctx, environ, "outbox", "stats"); r.code != 0 || !strings.Contains(r.stdout, "lapsed claims 2") || !strings.Contains(r.stdout, "processed (kept until Plane's cleaner)  1") {
		t.Errorf("stats: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"dead"}, {"redrive", "--all", "--yes"}} {
		r := runOutboxCLI(ctx, environ, append([]string{"outbox"}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "warren outbox migrate --schema plane") {
			t.Errorf("%v without the migration: exit %d, want 1 saying what to run\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runOutboxCLI(ctx, environ, "outbox", "purge", "--older-than", "1h", "--yes"); r.code != 2 || !strings.Contains(r.stderr, "Plane's cleaner") {
		t.Errorf("purge on Plane's table: exit %d, want 2\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = runOutboxCLI(ctx, environ, "outbox", "migrate", "--schema", "plane")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("migrated from version 0 to %d", outbox.PlaneSchemaVersion())) {
		t.Fatalf("migrate --schema plane: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runOutboxCLI(ctx, environ, "outbox", "migrate"); r.code != 0 || !strings.Contains(r.stdout, "has warren's optional columns") {
		t.Errorf("second migrate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	p.Exec(`UPDATE {table} SET claimed_at = now(), warren_dead_at = now(), warren_attempts = 20, warren_last_error = 'broker said no' WHERE event_id = $1::uuid`, ids[3])
	r = runOutboxCLI(ctx, environ, "outbox", "dead", "--json")
	var rows []outboxRowJSON
	if err := json.Unmarshal([]byte(r.stdout), &rows); r.code != 0 || err != nil || len(rows) != 1 {
		t.Fatalf("dead --json: exit %d, %v, %d rows\n%s%s", r.code, err, len(rows), r.stdout, r.stderr)
	}
	if ev, err := warrenpkg.DecodeEvent(rows[0].Event); err != nil || ev.ID != ids[3] || rows[0].Attempts != 20 || rows[0].LastError != "broker said no" || rows[0].State != outbox.Dead {
		t.Errorf("dead row %+v (%v)", rows[0], err)
	}
	if r := runOutboxCLI(ctx, environ, "outbox", "redrive", "--id", ids[3], "--yes"); r.code != 0 || !strings.Contains(r.stdout, "redrove 1 dead rows") {
		t.Errorf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := p.Count("event_id = $1::uuid AND claimed_at IS NULL AND warren_dead_at IS NULL", ids[3]); n != 1 {
		t.Error("the redriven row is not unclaimed")
	}
	if n := p.Count("true"); n != len(ids) {
		t.Errorf("%d rows left of %d", n, len(ids))
	}
}

// `warren outbox migrate` on a table dropped while its migrations record
// remained creates it again and says so, rather than "up to date".
func TestOutboxCLIMigrateAfterTheTableWasDropped(t *testing.T) {
	t.Parallel()
	environ, ob, pool := outboxCLITable(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`DROP TABLE %q`, ob.Name())); err != nil {
		t.Fatal(err)
	}
	r := runOutboxCLI(ctx, environ, "outbox", "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, "did not exist though its migrations record said schema version") || strings.Contains(r.stdout, "up to date") {
		t.Fatalf("outbox migrate after DROP TABLE: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := ob.CheckSchema(ctx, pool); err != nil {
		t.Errorf("after migrate: %v", err)
	}
}
