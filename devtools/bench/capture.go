package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/capture"
)

// The capture scenario's workload: a table of captureRows rows, updated
// whole captureBulk times, then row by row captureSingles times.
const (
	captureRows    = 10000
	captureBulk    = 3
	captureSingles = 2000
)

// captureDDL is a table shaped like Plane's issues, with a large column
// the events leave out.
const captureDDL = `CREATE TABLE %s (
	id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	name             text NOT NULL,
	state            text,
	priority         text,
	sort_order       double precision NOT NULL DEFAULT 0,
	sequence_id      integer,
	description_html text,
	workspace_id     uuid NOT NULL,
	project_id       uuid,
	assignee         text,
	label            text,
	start_date       date,
	target_date      date,
	created_at       timestamptz NOT NULL DEFAULT now(),
	updated_at       timestamptz NOT NULL DEFAULT now(),
	deleted_at       timestamptz
)`

// captureTracked are the columns every trigger variant tracks: all but
// description_html.
var captureTracked = []string{"id", "name", "state", "priority", "sort_order", "sequence_id", "workspace_id", "project_id",
	"assignee", "label", "start_date", "target_date", "created_at", "updated_at", "deleted_at"}

func captureScenario() scenario {
	return scenario{
		name: "capture",
		about: fmt.Sprintf("What a capture trigger costs the statements it watches. A table shaped like Plane's issues (16 columns, a uuid key) "+
			"holds %d rows; one measurement runs %d UPDATEs of every row (bulk) and then %d single-row UPDATEs by key, each its own "+
			"transaction with its commit (single), with no trigger (the baseline) and with each trigger writing one event per changed "+
			"row to a warren outbox table. warren is `warren outbox capture`'s generated statement-level trigger (transition tables, one "+
			"INSERT … SELECT per statement). The others are row-level triggers written by hand for comparison: one with static column "+
			"lists, and one in Plane's shape (per row: the column list from information_schema, a to_jsonb diff, the insert inside "+
			"EXCEPTION WHEN others). The ratio is the throughput kept with the trigger.", captureRows, captureBulk, captureSingles),
		metrics: []metric{{name: "bulk rows/s"}, {name: "single updates/s"}},
		size: func(*env) string {
			return fmt.Sprintf("%d rows, %d bulk UPDATEs of all of them, %d single-row UPDATEs", captureRows, captureBulk, captureSingles)
		},
		variants: []variant{
			{name: "raw: no trigger", baseline: true, run: captureRun(nil)},
			{name: "warren: capture, statement-level", run: captureRun(installWarrenCapture)},
			{name: "row-level, static columns (hand-written)", run: captureRun(installRowStatic)},
			{name: "row-level, Plane's shape (information_schema)", run: captureRun(installRowPlane)},
		},
	}
}

// captureBench is one measurement's source table and outbox.
type captureBench struct {
	pool   *pgxpool.Pool
	outbox *outbox.Table
	source string // unquoted name
	ids    []string
}

func (b *captureBench) quoted() string { return pgx.Identifier{b.source}.Sanitize() }

func (b *captureBench) close() {
	ctx := context.Background()
	b.pool.Exec(ctx, `DROP TABLE IF EXISTS `+b.quoted())
	b.pool.Exec(ctx, `DROP FUNCTION IF EXISTS `+pgx.Identifier{b.source + "_warren_capture"}.Sanitize()+`()`)
	b.pool.Exec(ctx, `DROP FUNCTION IF EXISTS `+pgx.Identifier{b.source + "_bench_trigger"}.Sanitize()+`()`)
	b.pool.Exec(ctx, `DELETE FROM `+capture.MigrationsTable+` WHERE name = $1`, "public."+b.source)
	if b.outbox != nil {
		b.pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{b.outbox.Name()}.Sanitize()+`, `+
			pgx.Identifier{b.outbox.Name() + "_migrations"}.Sanitize())
	}
	b.pool.Close()
}

// captureRun measures the workload on a fresh table with the trigger that
// install puts on it (none when nil), and checks that the trigger wrote
// one event per row changed: a trigger that wrote nothing would be fast.
func captureRun(install func(ctx context.Context, b *captureBench) error) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		pool, err := pgPool(ctx, e)
		if err != nil {
			return nil, err
		}
		b := &captureBench{pool: pool, source: uniqueName("capture")}
		defer b.close()
		if b.outbox, err = outbox.New(uniqueName("capob")); err != nil {
			return nil, err
		}
		if _, err := b.outbox.Migrate(ctx, pool); err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf(captureDDL, b.quoted())); err != nil {
			return nil, err
		}
		_, err = pool.Exec(ctx, `INSERT INTO `+b.quoted()+` (name, state, priority, sequence_id, description_html, workspace_id, project_id, assignee)
			SELECT 'item ' || i, 'todo', 'none', i, repeat('<p>long text</p>', 40), '7f5e5b8a-1c2d-4e3f-9a0b-1c2d3e4f5a6b',
				'0b7c5e2a-9f7d-4c1e-8a53-2f0f4f1c9d11', 'user-' || (i % 20)
			FROM generate_series(1, $1) i`, captureRows)
		if err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+b.quoted()); err != nil {
			return nil, err
		}
		rows, err := pool.Query(ctx, `SELECT id::text FROM `+b.quoted())
		if err != nil {
			return nil, err
		}
		if b.ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, err
		}
		if install != nil {
			if err := install(ctx, b); err != nil {
				return nil, fmt.Errorf("install the trigger: %w", err)
			}
		}

		start := time.Now()
		for range captureBulk {
			if _, err := pool.Exec(ctx, `UPDATE `+b.quoted()+` SET sort_order = sort_order + 1, updated_at = clock_timestamp()`); err != nil {
				return nil, err
			}
		}
		bulk := time.Since(start)

		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Release()
		single := `UPDATE ` + b.quoted() + ` SET sort_order = sort_order + 1, updated_at = clock_timestamp() WHERE id = $1`
		start = time.Now()
		for i := range captureSingles {
			if _, err := conn.Exec(ctx, single, b.ids[i%len(b.ids)]); err != nil {
				return nil, err
			}
		}
		singles := time.Since(start)

		var events int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{b.outbox.Name()}.Sanitize()).Scan(&events); err != nil {
			return nil, err
		}
		want := 0
		if install != nil {
			want = captureBulk*captureRows + captureSingles
		}
		if events != want {
			return nil, fmt.Errorf("the trigger wrote %d events, want %d", events, want)
		}
		return figures{float64(captureBulk*captureRows) / bulk.Seconds(), float64(captureSingles) / singles.Seconds()}, nil
	}
}

func installWarrenCapture(ctx context.Context, b *captureBench) error {
	_, err := capture.Install(ctx, b.pool, capture.Spec{
		Table: b.source, EntityType: "issue", EventPrefix: "workitem", Outbox: b.outbox.Name(),
		Exclude: []string{"description_html"}, WorkspaceColumn: "workspace_id", ProjectColumn: "project_id",
	})
	return err
}

// installRowStatic is the row-level trigger one would write by hand with
// the column lists spelled out: the same events as warren's, one INSERT
// per row.
func installRowStatic(ctx context.Context, b *captureBench) error {
	var data, diff []string
	for _, c := range captureTracked {
		data = append(data, fmt.Sprintf("'%s', NEW.%s", c, c))
		diff = append(diff, fmt.Sprintf("CASE WHEN OLD.%[1]s IS DISTINCT FROM NEW.%[1]s THEN jsonb_build_object('%[1]s', OLD.%[1]s) ELSE '{}'::jsonb END", c))
	}
	body := fmt.Sprintf(`
DECLARE prev jsonb;
BEGIN
	prev := %s;
	IF prev = '{}'::jsonb THEN RETURN NULL; END IF;
	INSERT INTO %s (event_id, event_type, entity_type, entity_id, workspace_id, project_id, initiator_id, initiator_type, payload)
	VALUES (gen_random_uuid()::text, 'workitem.updated', 'issue', NEW.id::text, NEW.workspace_id::text, NEW.project_id::text,
		nullif(current_setting('warren.initiator_id', true), ''),
		coalesce(nullif(current_setting('warren.initiator_type', true), ''), 'USER'),
		jsonb_build_object('data', jsonb_build_object(%s), 'previous_attributes', prev));
	PERFORM pg_notify('%s', '');
	RETURN NULL;
END`, strings.Join(diff, " || "), pgx.Identifier{b.outbox.Name()}.Sanitize(), strings.Join(data, ", "), b.outbox.Channel())
	return b.rowTrigger(ctx, body)
}

// installRowPlane is a row-level trigger in the shape the Plane analysis
// describes for its Label and State tables: every row looks its columns
// up in information_schema, diffs to_jsonb(OLD) against to_jsonb(NEW), and
// swallows a failed insert with a warning.
func installRowPlane(ctx context.Context, b *captureBench) error {
	body := fmt.Sprintf(`
DECLARE
	col record;
	o jsonb := to_jsonb(OLD);
	n jsonb := to_jsonb(NEW);
	prev jsonb := '{}'::jsonb;
BEGIN
	FOR col IN SELECT column_name FROM information_schema.columns
		WHERE table_schema = TG_TABLE_SCHEMA AND table_name = TG_TABLE_NAME AND column_name <> 'description_html'
	LOOP
		IF o -> col.column_name IS DISTINCT FROM n -> col.column_name THEN
			prev := prev || jsonb_build_object(col.column_name, o -> col.column_name);
		END IF;
	END LOOP;
	IF prev = '{}'::jsonb THEN RETURN NULL; END IF;
	BEGIN
		INSERT INTO %s (event_id, event_type, entity_type, entity_id, workspace_id, project_id, initiator_type, payload)
		VALUES (gen_random_uuid()::text, 'workitem.updated', 'issue', NEW.id::text, NEW.workspace_id::text, NEW.project_id::text,
			coalesce(nullif(current_setting('plane.initiator_type', true), ''), 'USER'),
			jsonb_build_object('data', n - 'description_html', 'previous_attributes', prev))
		ON CONFLICT (event_id) DO NOTHING;
	EXCEPTION WHEN others THEN
		RAISE WARNING 'outbox insert failed: %%', SQLERRM;
	END;
	RETURN NULL;
END`, pgx.Identifier{b.outbox.Name()}.Sanitize())
	return b.rowTrigger(ctx, body)
}

// rowTrigger installs body as an AFTER UPDATE … FOR EACH ROW trigger.
func (b *captureBench) rowTrigger(ctx context.Context, body string) error {
	fn := pgx.Identifier{b.source + "_bench_trigger"}.Sanitize()
	_, err := b.pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $body$%s$body$;
		CREATE TRIGGER bench_capture AFTER UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s();`, fn, body, b.quoted(), fn))
	return err
}
