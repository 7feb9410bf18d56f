package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

func TestOpenPlane(t *testing.T) {
	ob, err := outbox.Open("", outbox.Options{Schema: outbox.SchemaPlane})
	if err != nil || ob.Name() != outbox.DefaultPlaneTable || ob.Schema() != outbox.SchemaPlane || ob.Lease() != outbox.DefaultLease {
		t.Fatalf("Open plane with defaults = %v, %v", ob, err)
	}
	for _, opts := range []outbox.Options{{Schema: "mongo"}, {Schema: outbox.SchemaPlane, Lease: time.Microsecond}} {
		if _, err := outbox.Open("outbox", opts); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Open(%+v) = %v, want ErrInvalidConfig", opts, err)
		}
	}
	// The row reader reads Plane's columns as warren's: the select list
	// has every column ScanRow scans, and the optional columns appear
	// only in the migrated variant.
	for _, migrated := range []bool{false, true} {
		cols := outboxsql.RowColumns(ob, migrated)
		if n, want := strings.Count(topLevelCommas(cols), ","), strings.Count(outboxsql.Columns, ","); n != want {
			t.Errorf("migrated=%v: %d columns, ScanRow reads %d:\n%s", migrated, n+1, want+1, cols)
		}
		if strings.Contains(cols, "warren_") != migrated || strings.Contains(cols, "{") {
			t.Errorf("migrated=%v: %s", migrated, cols)
		}
	}
	if w := must(outbox.New("")); outboxsql.RowColumns(w, true) != outboxsql.Columns {
		t.Error("a warren table reads outboxsql.Columns")
	}
}

// topLevelCommas keeps the commas of s outside parentheses.
func topLevelCommas(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestCheckPlane(t *testing.T) {
	ctx := context.Background()
	pool := testenv.PgPool(t)
	missing := testenv.Name(t, "missing")
	ob := must(outbox.Open(missing, outbox.Options{Schema: outbox.SchemaPlane}))
	if err := ob.CheckSchema(ctx, pool); !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("CheckSchema on a missing table: %v", err)
	}
	if _, err := ob.Migrate(ctx, pool); !errors.Is(err, outbox.ErrSchema) {
		t.Errorf("Migrate on a missing Plane table: %v", err)
	}

	// warren's own table is not Plane's.
	w := testenv.NewOutboxTable(t)
	notPlane := must(outbox.Open(w.Table.Name(), outbox.Options{Schema: outbox.SchemaPlane}))
	if err := notPlane.CheckSchema(ctx, pool); !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "no column claimed_at") {
		t.Errorf("CheckSchema on warren's table in Plane mode: %v", err)
	}

	// A column of a type the relay does not read.
	p := testenv.NewPlaneTable(t, false)
	p.Exec(`ALTER TABLE {table} ALTER COLUMN claimed_at TYPE text`)
	if err := p.Outbox(outbox.Options{}).CheckSchema(ctx, pool); !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "column claimed_at is text") {
		t.Errorf("CheckSchema with claimed_at as text: %v", err)
	}

	for _, tz := range []bool{false, true} {
		p := testenv.NewPlaneTable(t, tz)
		ob := p.Outbox(outbox.Options{})
		ps, err := ob.CheckPlane(ctx, pool)
		if err != nil || ps.Migrated || ps.TimeZone != tz {
			t.Fatalf("CheckPlane before the migration: %+v, %v", ps, err)
		}
		res, err := ob.Migrate(ctx, pool)
		if err != nil || res.From != 0 || res.To != outbox.PlaneSchemaVersion() {
			t.Fatalf("Migrate: %+v, %v", res, err)
		}
		if res, err := ob.Migrate(ctx, pool); err != nil || res.From != res.To {
			t.Fatalf("second Migrate: %+v, %v", res, err)
		}
		if ps, err := ob.CheckPlane(ctx, pool); err != nil || !ps.Migrated {
			t.Fatalf("CheckPlane after the migration: %+v, %v", ps, err)
		}
		// Plane's own insert, naming its columns, still works.
		p.Insert(1)
		if n := p.Count("warren_attempts = 0 AND warren_dead_at IS NULL"); n != 1 {
			t.Errorf("a row written after the migration: %d with the defaults", n)
		}
		p.Exec(`INSERT INTO {table_warren_migrations} (version, name) VALUES (99, 'future')`)
		if err := ob.CheckSchema(ctx, pool); !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "newer") {
			t.Errorf("CheckSchema with a newer migration: %v", err)
		}
	}
}

// A Plane table's rows read as warren rows, whichever timestamp type
// Django gave it; Stats counts them by Plane's states; warren neither
// writes nor deletes its rows.
func TestPlaneRowsAndStats(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		tz, migrated bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("timestamptz=%v migrated=%v", c.tz, c.migrated), func(t *testing.T) {
			p := testenv.NewPlaneTable(t, c.tz)
			ob := p.Outbox(outbox.Options{Lease: time.Minute})
			if c.migrated {
				if _, err := ob.Migrate(ctx, p.Pool); err != nil {
					t.Fatal(err)
				}
			}
			ids := p.Insert(7)
			p.Exec(`UPDATE {table} SET created_at = now() - interval '1 hour' WHERE event_id = $1::uuid`, ids[0])
			p.Exec(`UPDATE {table} SET claimed_at = now() - interval '1 day', processed_at = now() - interval '1 day' WHERE event_id = $1::uuid`, ids[1])
			p.Exec(`UPDATE {table} SET claimed_at = now() - interval '3 days' WHERE event_id = ANY($1::uuid[])`, ids[2:4]) // stranded
			p.Exec(`UPDATE {table} SET claimed_at = now() WHERE event_id = $1::uuid`, ids[4])                              // in flight
			wantDead := 0
			if c.migrated {
				p.Exec(`UPDATE {table} SET claimed_at = now(), warren_dead_at = now(), warren_attempts = 3, warren_last_error = 'nope' WHERE event_id = $1::uuid`, ids[5])
				wantDead = 1
			}
			s, err := ob.Stats(ctx, p.Pool)
			if err != nil {
				t.Fatal(err)
			}
			want := outbox.Stats{Pending: int64(6 - wantDead), InFlight: 1, Lapsed: 2, Dead: int64(wantDead), Delivered: 1}
			got := s
			got.OldestPendingAge = 0
			if got != want {
				t.Errorf("Stats = %+v, want %+v", got, want)
			}
			if s.OldestPendingAge < 59*time.Minute || s.OldestPendingAge > 2*time.Hour {
				t.Errorf("oldest pending age %v, want about an hour", s.OldestPendingAge)
			}

			if c.migrated {
				dead, err := ob.Dead(ctx, p.Pool, outbox.Filter{EventIDs: []string{ids[5]}, EventTypePrefix: "workitem."})
				if err != nil || len(dead) != 1 {
					t.Fatalf("Dead = %v, %v", dead, err)
				}
				r := dead[0]
				if r.Event.ID != ids[5] || r.State != outbox.Dead || r.Attempts != 3 || r.LastError != "nope" || r.FinishedAt.IsZero() ||
					r.Event.WorkspaceID != "11111111-1111-1111-1111-111111111111" || r.Event.InitiatorType != "USER" || r.DecodeErr != nil {
					t.Errorf("dead row %+v", r)
				}
				// The timestamps read as the instants Plane's NOW() wrote,
				// whichever type the column is.
				for name, at := range map[string]time.Time{"finished_at": r.FinishedAt, "created_at": r.Event.CreatedAt} {
					if d := time.Since(at); d < -time.Minute || d > time.Minute {
						t.Errorf("dead row's %s read as %v, %v from now", name, at, d)
					}
				}
				if n, err := ob.Redrive(ctx, p.Pool, outbox.Filter{}); err != nil || n != 1 {
					t.Fatalf("Redrive = %d, %v", n, err)
				}
				if n := p.Count("event_id = $1::uuid AND claimed_at IS NULL AND warren_dead_at IS NULL AND warren_attempts = 0", ids[5]); n != 1 {
					t.Error("the redriven row is not unclaimed with its attempts reset")
				}
			} else {
				if _, err := ob.Dead(ctx, p.Pool, outbox.Filter{}); !errors.Is(err, outbox.ErrPlaneMigrationNeeded) {
					t.Errorf("Dead without the migration: %v", err)
				}
				if _, err := ob.Redrive(ctx, p.Pool, outbox.Filter{}); !errors.Is(err, outbox.ErrPlaneMigrationNeeded) {
					t.Errorf("Redrive without the migration: %v", err)
				}
			}
			if _, err := ob.Purge(ctx, p.Pool, outbox.PurgeOptions{Before: time.Now()}); !errors.Is(err, outbox.ErrPlaneRowsAreKept) {
				t.Errorf("Purge on a Plane table: %v", err)
			}
			tx, err := p.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := ob.Publish(ctx, tx, event("x")); !errors.Is(err, outbox.ErrPlaneRowsAreKept) {
				t.Errorf("Publish to a Plane table: %v", err)
			}
			if n := p.Count("true"); n != 7 {
				t.Errorf("%d rows, want the 7 written", n)
			}
		})
	}
}
