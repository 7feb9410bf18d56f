package capture_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/capture"
)

// Postgres empties an UNLOGGED table when it recovers from a crash or an
// immediate shutdown: its rows vanish with no .deleted event, and
// consumers keep entities the table no longer has. Capture refuses such a
// table, and a partitioned table with such a partition.
func TestInstallRefusesAnUnloggedTable(t *testing.T) {
	for name, ddl := range map[string]string{
		"table":     `CREATE UNLOGGED TABLE {source} (id int PRIMARY KEY, v text)`,
		"partition": `CREATE TABLE {source} (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnvWith(t, ddl)
			if name == "partition" {
				// Dropped with its parent when the test ends.
				e.exec(`CREATE UNLOGGED TABLE ` + ident(testenv.Name(t, "p0")) + ` PARTITION OF {source} FOR VALUES FROM (0) TO (100)`)
			}
			_, err := capture.Install(context.Background(), e.pool, simpleSpec(e))
			if !errors.Is(err, capture.ErrInvalidSpec) || !strings.Contains(err.Error(), "UNLOGGED") {
				t.Fatalf("Install on an unlogged %s: %v; want ErrInvalidSpec naming UNLOGGED", name, err)
			}
		})
	}
}

// Where a capture writes must outlive a crash too: the outbox, which
// holds the events, and under Record the capture errors table, the only
// record of a change whose event was never written. Install refuses
// either when it is UNLOGGED (the outbox as a schema the relay refuses).
func TestInstallRefusesAnUnloggedOutboxOrErrorsTable(t *testing.T) {
	t.Parallel()
	t.Run("errors table", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		errorsTable := e.outbox.CaptureErrorsTable()
		testenv.DropTables(t, errorsTable)
		e.exec(`CREATE UNLOGGED TABLE ` + ident(errorsTable) + ` (id bigint)`)
		spec := simpleSpec(e)
		spec.OnFailure = capture.Record
		_, err := capture.Install(context.Background(), e.pool, spec)
		if !errors.Is(err, capture.ErrInvalidSpec) || !strings.Contains(err.Error(), errorsTable+" is UNLOGGED") {
			t.Fatalf("Install under Record with an unlogged errors table: %v; want ErrInvalidSpec naming %s", err, errorsTable)
		}
	})
	t.Run("outbox", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.exec(`ALTER TABLE ` + ident(e.outbox.Name()) + ` SET UNLOGGED`)
		_, err := capture.Install(context.Background(), e.pool, simpleSpec(e))
		if !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), e.outbox.Name()+" is UNLOGGED") {
			t.Fatalf("Install into an unlogged outbox: %v; want ErrSchema naming %s", err, e.outbox.Name())
		}
	})
}
