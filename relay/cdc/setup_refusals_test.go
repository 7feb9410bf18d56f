package cdc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

// runErr runs a relay with cfg and returns what Run returned, failing the
// test if it still runs after 30s.
func runErr(t *testing.T, cfg cdc.Config) error {
	t.Helper()
	r, err := cdc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatal("Run still ran after 30s; want it to refuse")
	}
	return err
}

// An outbox rebuilt by swapping tables is in no publication (the
// publication follows the old table's OID): the relay refuses to stream
// it, rather than stream nothing for ever, and once the group is retired
// a new one publishes what the new table holds and what comes after.
func TestSwappedOutboxTableIsRefusedThenStreamedByANewGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	cfg := e.config()
	r, stop := e.start(cfg)
	testenv.WaitFor(t, time.Minute, "the relay to stream", r.Streaming)
	stop()
	old, swap := e.ob.Table.Name()+"_old", e.ob.Table.Name()+"_swap"
	testenv.DropTables(t, old, swap)
	e.ob.Exec(`CREATE TABLE ` + swap + ` (LIKE {table} INCLUDING ALL)`)
	e.ob.Exec(`ALTER TABLE {table} RENAME TO ` + old)
	e.ob.Exec(`ALTER TABLE ` + swap + ` RENAME TO ` + e.ob.Table.Name())
	e.ob.Publish(testenv.OutboxEvent("in-the-new-table"))
	if err := runErr(t, cfg); !errors.Is(err, cdc.ErrNotPublished) {
		t.Fatalf("Run on a swapped table: %v, want ErrNotPublished", err)
	}
	if err := cdc.DropSlot(context.Background(), e.ob.Pool, e.ob.Table.Name(), e.slot, e.slot); err != nil {
		t.Fatal(err)
	}
	r, _ = e.start(cfg)
	testenv.WaitFor(t, time.Minute, "the new group to stream", r.Streaming)
	e.ob.Publish(testenv.OutboxEvent("after-swap"))
	e.receive([]string{"in-the-new-table", "after-swap"}, 30*time.Second)
}

// Two relay groups (two slots) on one outbox table would each trim rows
// the other still needs: the second is refused at start, with an error
// naming the slot that serves the table, and makes nothing.
func TestASecondGroupOnOneTableIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	r, stop := e.start(e.config())
	testenv.WaitFor(t, time.Minute, "group A to stream", r.Streaming)
	stop()
	cfgB := e.config()
	cfgB.Slot = testenv.CDCSlot(t, e.ob.Pool, e.ob.Table.Name()[:min(len(e.ob.Table.Name()), 50)]+"b")
	err := runErr(t, cfgB)
	if !errors.Is(err, cdc.ErrOtherGroup) {
		t.Fatalf("Run of a second group: %v, want ErrOtherGroup", err)
	}
	t.Log(err)
	var slots int
	if err := e.ob.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, cfgB.Slot).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("the refused group made %d slots (%v)", slots, err)
	}
}
