package cdc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

// A relay refuses an UNLOGGED outbox (a crash's recovery empties it, its
// events with it) and an UNLOGGED state table (emptied, its record of
// what was settled gone, the next session would publish again every row
// settled since the slot's last saved position): Run returns
// ErrNotLogged, naming the table, rather than retrying for ever.
func TestRunRefusesAnUnloggedOutboxOrStateTable(t *testing.T) {
	t.Parallel()
	run := func(e *env) error {
		r, err := cdc.New(e.config())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return r.Run(ctx)
	}
	t.Run("outbox", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		table := e.ob.Table.Name()
		e.ob.Exec(`ALTER TABLE {table} SET UNLOGGED`)
		if err := run(e); !errors.Is(err, cdc.ErrNotLogged) || !strings.Contains(err.Error(), table+" is UNLOGGED") {
			t.Fatalf("Run on an unlogged outbox: %v; want ErrNotLogged naming %s", err, table)
		}
	})
	t.Run("state table", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, stop := e.start(e.config())
		testenv.WaitBackfilled(t, e.ob.Pool, e.ob.Table.Name(), e.slot)
		stop()
		state := e.ob.Table.Name() + "_cdc"
		e.ob.Exec(`ALTER TABLE ` + pgx.Identifier{state}.Sanitize() + ` SET UNLOGGED`)
		if err := run(e); !errors.Is(err, cdc.ErrNotLogged) || !strings.Contains(err.Error(), state+" is UNLOGGED") {
			t.Fatalf("Run with an unlogged state table: %v; want ErrNotLogged naming %s", err, state)
		}
	})
}
