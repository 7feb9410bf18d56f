package capture_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/capture"
)

// catalogObjects lists what a generated migration could create, drop or
// change besides rows: relations (with their privileges), functions,
// triggers, schemas, roles (with their powers), types, rules, policies,
// extensions, event triggers, publications and this session's settings.
// Objects are named by their rows' own columns (oids, names), never by
// a reg* cast: a cast looks the name up in the catalog as it is now, not
// in the transaction's snapshot, so another session dropping its table
// between the two snapshots would change the line of a table the
// snapshot still holds.
const catalogObjects = `
	SELECT 'class ' || relnamespace::text || '.' || relname || ' ' || coalesce(relacl::text, '') FROM pg_class
	UNION ALL SELECT 'proc ' || oid::text || ' ' || proname || ' ' || coalesce(proconfig::text, '') || prosecdef::text FROM pg_proc
	UNION ALL SELECT 'trigger ' || tgname || ' on ' || tgrelid::text FROM pg_trigger
	UNION ALL SELECT 'schema ' || nspname FROM pg_namespace
	UNION ALL SELECT 'role ' || rolname || ' ' || rolsuper::text || rolcanlogin::text FROM pg_roles
	UNION ALL SELECT 'member ' || roleid::text || ' ' || member::text FROM pg_auth_members
	UNION ALL SELECT 'type ' || typnamespace::text || '.' || typname FROM pg_type
	UNION ALL SELECT 'rule ' || rulename || ' on ' || ev_class::text FROM pg_rewrite
	UNION ALL SELECT 'policy ' || polname FROM pg_policy
	UNION ALL SELECT 'extension ' || extname FROM pg_extension
	UNION ALL SELECT 'event trigger ' || evtname FROM pg_event_trigger
	UNION ALL SELECT 'publication ' || pubname FROM pg_publication
	UNION ALL SELECT 'setting ' || name || '=' || setting FROM pg_settings`

// rowsWritten is how many rows this transaction has inserted, updated
// and deleted in every user table.
const rowsWritten = `SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_xact_user_tables`

// FuzzGenerateQuotesEverything installs the SQL generated for a table
// whose column name, and a spec whose event prefix, entity type and
// version, hold the fuzzer's text, in a transaction it rolls back, and
// asserts that the SQL created the function and its triggers and
// nothing else, wrote no row, and that the events carry the text
// unchanged. The seeds run as a normal test on the real Postgres.
func FuzzGenerateQuotesEverything(f *testing.F) {
	for _, seed := range [][4]string{
		{"name", "workitem", "issue", "1"},
		// A newline ends a -- comment; a dollar tag ends the body.
		{"x\nCREATE TABLE pwned_by_column (a int); --", "workitem", "issue", "1"},
		{"$warren_capture$; CREATE TABLE pwned_by_tag (a int); $warren_capture$", "workitem", "issue", "1"},
		{"name", "x$warren_capture$; CREATE TABLE pwned_by_prefix (a int); $warren_capture$", "$warren_capture_1$", "$$"},
		{"*/ DROP TABLE x; /*", "'); DROP TABLE x; --", `it's`, `'`},
		{`a"b`, `back\slash`, `\'`, `E'\''`},
		{`\`, `x\`, `\\`, `\x41`},
		// Reserved words, and names the trigger's own code uses.
		{"select", "from", "table", "user"},
		{"new", "old", "tg_op", "written"},
		{"subscription", "warren_new_rows", "warren_old_rows", "NULL"},
		{"warren_new_rows", "a", "b", "c"},
		// Unicode, and a name past 63 bytes, which Postgres truncates.
		{"日本語の列", "événement", "ü", "🙂"},
		{strings.Repeat("é", 40), strings.Repeat("x", 200), strings.Repeat("y", 300), strings.Repeat("z", 100)},
		{strings.Repeat("n", 70) + "\nDROP TABLE x; --", "p", "e", "v"},
		// What the spec refuses: control characters, edge white space.
		{"ok", "work\titem", " lead", "trail "},
		{"ok", "", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	pool := testenv.PgPool(f)
	f.Fuzz(func(t *testing.T, column, prefix, entity, version string) {
		ctx := context.Background()
		// REPEATABLE READ: the catalog reads see one snapshot, in which
		// other sessions' tables come and go not.
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		// Everything the input makes, the outbox too, goes with the
		// rollback: a fuzzing worker is stopped without its cleanups.
		defer tx.Rollback(context.WithoutCancel(ctx))
		ob, err := outbox.New(testenv.Name(t, "ob"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		schema := testenv.Name(t, "fz")
		source := pgx.Identifier{schema, "t"}.Sanitize()
		// The DO block loads PL/pgSQL first, whose settings would
		// otherwise appear when the function is created.
		if _, err := tx.Exec(ctx, `DO $$BEGIN END$$; CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+source+` (id text PRIMARY KEY, `+pgx.Identifier{column}.Sanitize()+` text)`); err != nil {
			t.Skipf("Postgres refuses the column name %q: %v", column, err) // empty, NUL, not UTF-8, "id"
		}
		// The catalog's name: Postgres truncates a name to 63 bytes.
		var stored string
		if err := tx.QueryRow(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum = 2`, source).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		before, written := catalogSnapshot(t, tx), rowsWrittenBy(t, tx)

		spec := capture.Spec{Table: schema + ".t", Outbox: ob.Name(), EventPrefix: prefix, EntityType: entity, Version: version}
		m, err := capture.Generate(ctx, tx, spec)
		if err != nil {
			if !errors.Is(err, capture.ErrInvalidSpec) {
				t.Fatalf("Generate: %v, want it to succeed or refuse the spec", err)
			}
			return
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("install the generated SQL: %v\n%s", err, m.SQL)
		}
		after := catalogSnapshot(t, tx)
		var want []string
		err = tx.QueryRow(ctx, `SELECT ARRAY['proc ' || p.oid::text || ' ' || p.proname || ' ' || p.proconfig::text || 'false']
				|| ARRAY(SELECT 'trigger ' || n || ' on ' || $1::regclass::oid::text
					FROM unnest(ARRAY['warren_capture_insert', 'warren_capture_update', 'warren_capture_delete', 'warren_capture_truncate',
						'warren_capture_replica_insert', 'warren_capture_replica_update', 'warren_capture_replica_delete', 'warren_capture_guard']) AS n)
			FROM pg_proc p WHERE p.oid = to_regprocedure($2)`,
			source, pgx.Identifier{schema, "t_warren_capture"}.Sanitize()+"()").Scan(&want)
		if err != nil {
			t.Fatalf("the capture function is not where it should be: %v", err)
		}
		if added, dropped := diff(after, before), diff(before, after); !slices.Equal(added, sorted(want)) || len(dropped) > 0 {
			t.Fatalf("installing the generated SQL created %q and dropped or changed %q; want it to create only %q\n%s", added, dropped, want, m.SQL)
		}
		if got := rowsWrittenBy(t, tx); got != written {
			t.Fatalf("installing the generated SQL wrote %d rows", got-written)
		}

		// The events carry the text as it was given.
		if _, err := tx.Exec(ctx, `INSERT INTO `+source+` VALUES ('k', 'v')`); err != nil {
			t.Fatalf("insert into the captured table: %v", err)
		}
		var (
			eventType, entityType, value string
			gotVersion                   *string
		)
		err = tx.QueryRow(ctx, `SELECT event_type, entity_type, version, payload->'data'->>$1 FROM `+pgx.Identifier{ob.Name()}.Sanitize(),
			stored).Scan(&eventType, &entityType, &gotVersion, &value)
		if err != nil {
			t.Fatalf("read the event: %v", err)
		}
		wantEntity := cmpOr(entity, "t")
		if eventType != cmpOr(prefix, wantEntity)+".created" || entityType != wantEntity || value != "v" ||
			(gotVersion == nil) != (version == "") || gotVersion != nil && *gotVersion != version {
			t.Fatalf("event %q %q version %v data[%q] = %q; want the spec's text unchanged", eventType, entityType, gotVersion, stored, value)
		}
	})
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func catalogSnapshot(t *testing.T, tx pgx.Tx) map[string]int {
	t.Helper()
	rows, _ := tx.Query(context.Background(), catalogObjects)
	seen := map[string]int{}
	var line string
	if _, err := pgx.ForEachRow(rows, []any{&line}, func() error { seen[line]++; return nil }); err != nil {
		t.Fatal(err)
	}
	return seen
}

func rowsWrittenBy(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	var n int64
	if err := tx.QueryRow(context.Background(), rowsWritten).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// diff lists, sorted, what a holds more of than b.
func diff(a, b map[string]int) []string {
	var out []string
	for k, n := range a {
		if n > b[k] {
			out = append(out, k)
		}
	}
	return sorted(out)
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
