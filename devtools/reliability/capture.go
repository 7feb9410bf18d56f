package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox/capture"
)

// The captured table: business rows whose events only the trigger capture
// (outbox/capture) writes. It is partitioned, so a write can name the
// parent or a partition, and the capture's row-level triggers, cloned to
// every partition, must fire for both.
const (
	capturedTable = "reliability_captured"
	capturedTypes = "captured" // event types captured.created, captured.updated
)

// capturedSchema creates the table with two partitions; the capture
// schema fault adds more after the install, and a column label_N that it
// renames.
const capturedSchema = `CREATE TABLE IF NOT EXISTS ` + capturedTable + ` (
	part    int  NOT NULL,
	id      text NOT NULL,
	note    text NOT NULL,
	label_0 text NOT NULL DEFAULT 'label',
	PRIMARY KEY (part, id)) PARTITION BY LIST (part);
CREATE TABLE IF NOT EXISTS ` + capturedTable + `_p0 PARTITION OF ` + capturedTable + ` FOR VALUES IN (0);
CREATE TABLE IF NOT EXISTS ` + capturedTable + `_p1 PARTITION OF ` + capturedTable + ` FOR VALUES IN (1)`

// capturedSpec is the capture the harness installs, and installs again
// after every schema change, as an operator must.
var capturedSpec = capture.Spec{Table: capturedTable, EventPrefix: capturedTypes, EntityIDColumn: "id"}

// writePath is how a captured write reaches its row.
type writePath struct {
	partition bool // names the partition, not the parent
	replica   bool // under SET LOCAL session_replication_role = replica
}

// writePaths are the paths the captured writes take in turn.
var writePaths = []writePath{{false, false}, {true, false}, {false, true}, {true, true}}

func (p writePath) String() string {
	s := "capture via parent"
	if p.partition {
		s = "capture via partition"
	}
	if p.replica {
		s += ", replica role"
	}
	return s
}

// installCapture creates the captured table and installs its capture. The
// outbox table must exist (the relays migrate it).
func (h *harness) installCapture(ctx context.Context) error {
	if _, err := h.admin.Exec(ctx, capturedSchema); err != nil {
		return fmt.Errorf("create the captured table: %w", err)
	}
	if _, err := capture.Install(ctx, h.pool, capturedSpec); err != nil {
		return fmt.Errorf("install the capture of %s: %w", capturedTable, err)
	}
	h.wl.captureParts.Store(2)
	return nil
}

// runCaptured writes business rows to the captured table at rate per
// second until ctx ends, through every path in turn (the parent, a
// partition, each also under the replica role) and to every partition in
// turn; every other group of four also updates the row it inserted,
// through the other table. Each event
// the trigger wrote goes to the ledger in the same transaction (see
// capturedWrite), so the checker holds each to its delivery like the
// workload's own.
func (w *workload) runCaptured(ctx context.Context, seed uint64, rate float64, rollbackPct int) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		path := writePaths[n%len(writePaths)]
		// Round-robin, not random: each path writes to each partition
		// within a few seconds, so a loss on any pair shows in any run.
		part := n / len(writePaths) % int(w.captureParts.Load())
		id := fmt.Sprintf("%s-captured-%05d", w.run, w.itemSeq.Add(1))
		steps := []step{capturedWrite(id, part, path, false)}
		if n%8 >= 4 {
			steps = append(steps, capturedWrite(id, part, writePath{partition: !path.partition, replica: path.replica}, true))
		}
		if status, _ := w.transact(ctx, steps, rng.IntN(100) < rollbackPct, false); status == statusFailed {
			w.captureFailed.Add(1)
		}
	}
}

// capturedWrite inserts (or updates) row id in partition part through
// path, and returns the event the capture wrote for it, read back from
// the outbox in the same transaction. A write that committed with no
// event is the loss this fault looks for: it gets a ledger row all the
// same, under an id naming the write ("no event: …"), which no consumer
// can deliver, so the checker reports it lost.
func capturedWrite(id string, part int, path writePath, update bool) step {
	return func(ctx context.Context, tx pgx.Tx) (warren.Event, *eventRecord, error) {
		if path.replica {
			if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
				return warren.Event{}, nil, err
			}
		}
		target := capturedTable
		if path.partition {
			target = fmt.Sprintf("%s_p%d", capturedTable, part)
		}
		typ, sql := capturedTypes+".created", `INSERT INTO `+target+` (part, id, note) VALUES ($1, $2, 'new')`
		if update {
			typ, sql = capturedTypes+".updated", `UPDATE `+target+` SET note = note || '+' WHERE part = $1 AND id = $2`
		}
		if _, err := tx.Exec(ctx, sql, part, id); err != nil {
			return warren.Event{}, nil, err
		}
		rec := &eventRecord{field: path.String(), value: target}
		ev := warren.Event{Type: typ, EntityID: id, InitiatorType: warren.InitiatorUser}
		err := tx.QueryRow(ctx, `SELECT event_id, initiator_type FROM `+outboxTable+`
			WHERE entity_type = $1 AND entity_id = $2 AND event_type = $3 AND state = 'pending'`,
			capturedTable, id, typ).Scan(&ev.ID, &ev.InitiatorType)
		if err == pgx.ErrNoRows {
			ev.ID = fmt.Sprintf("no event: %s of %s via %s (%s)", typ, id, target, path)
			err = nil
		}
		return ev, rec, err
	}
}

// captureSchemaChange is the capture fault: with the captured writes
// going on, it creates a partition (the writes name it at once), adds a
// column, renames one, and runs capture.Install again as an operator must
// after a migration. Between the rename and the Install the trigger names
// a column that is gone, so the writes fail: none may commit without its
// event, and the checker holds every one that committed to its delivery.
func (h *harness) captureSchemaChange(ctx context.Context, pause func(time.Duration)) (target, note string, err error) {
	h.captureChanges++
	n, part := h.captureChanges, h.wl.captureParts.Load()
	exec := func(sql string) error {
		_, err := h.pool.Exec(ctx, sql)
		return err
	}
	if err := exec(fmt.Sprintf(`CREATE TABLE %s_p%d PARTITION OF %s FOR VALUES IN (%d)`, capturedTable, part, capturedTable, part)); err != nil {
		return "", "", fmt.Errorf("create a partition: %w", err)
	}
	h.wl.captureParts.Add(1)
	pause(captureStepPause)
	if err := exec(fmt.Sprintf(`ALTER TABLE %s ADD COLUMN added_%d text NOT NULL DEFAULT 'added'`, capturedTable, n)); err != nil {
		return "", "", fmt.Errorf("add a column: %w", err)
	}
	pause(captureStepPause)
	if err := exec(fmt.Sprintf(`ALTER TABLE %s RENAME COLUMN label_%d TO label_%d`, capturedTable, n-1, n)); err != nil {
		return "", "", fmt.Errorf("rename a column: %w", err)
	}
	failed := h.wl.captureFailed.Load()
	pause(captureStepPause)
	res, err := capture.Install(ctx, h.pool, capturedSpec)
	if err != nil {
		return "", "", fmt.Errorf("install again after the schema change: %w", err)
	}
	if !res.Applied {
		return "", "", fmt.Errorf("install after the schema change applied nothing (version %d)", res.Version)
	}
	target = fmt.Sprintf("partition p%d, column added_%d, label_%d renamed to label_%d, capture version %d", part, n, n-1, n, res.Version)
	note = "no captured write fell between the rename and the install"
	if h.wl.captureFailed.Load() > failed {
		note = "captured writes failed between the rename and the install"
	}
	return target, note, nil
}

// captureStepPause separates the schema change's steps, so captured writes
// (two a second) fall between each.
const captureStepPause = 1500 * time.Millisecond
