package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox"
)

// WorkItem is the business row: a few of the columns of Plane's issues
// table, under Plane's names. StateID is the id of the item's state (in
// Plane a UUID of a row of its states table; here any id, such as
// "done").
type WorkItem struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	ProjectID   string `json:"project_id"`
	Name        string `json:"name"`
	StateID     string `json:"state_id"`
	Priority    string `json:"priority"`
}

// Event types, Plane's names: a change of state has an event type of its
// own, which Plane's state_changed automations trigger on; every other
// change is workitem.updated.
const (
	TypeCreated      = "workitem.created"
	TypeUpdated      = "workitem.updated"
	TypeStateUpdated = "workitem.state.updated"
)

// Actor is who makes a change: a user, or a system process such as an
// import or an automation.
type Actor struct {
	ID   string
	Type string // warren.InitiatorUser, warren.InitiatorSystemAutomation, …
}

// ErrNotFound is returned for a work item that does not exist.
var ErrNotFound = errors.New("work item not found")

// App writes work items in Table and their events to Outbox.
type App struct {
	Table  string // the work items table
	Outbox *outbox.Table
}

// New returns an App on the given tables ("" for the defaults
// "work_items" and the outbox's default).
func New(table, outboxTable string) (*App, error) {
	if table == "" {
		table = "work_items"
	}
	ob, err := outbox.New(outboxTable)
	if err != nil {
		return nil, err
	}
	return &App{Table: table, Outbox: ob}, nil
}

func (a *App) ident() string { return pgx.Identifier{a.Table}.Sanitize() }

// Migrate creates the work items table and the outbox. Replicas starting
// together may all call it: see CreateTables.
func (a *App) Migrate(ctx context.Context, db outbox.DB) error {
	if _, err := a.Outbox.Migrate(ctx, db); err != nil {
		return err
	}
	return CreateTables(ctx, db, `CREATE TABLE IF NOT EXISTS `+a.ident()+` (
		id text PRIMARY KEY,
		workspace_id text NOT NULL,
		project_id text NOT NULL,
		name text NOT NULL,
		state_id text NOT NULL,
		priority text NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now());
		-- Tables made before the column took Plane's name.
		DO $$ BEGIN
			IF EXISTS (SELECT FROM information_schema.columns WHERE table_schema = current_schema()
				AND table_name = `+quoteLiteral(a.Table)+` AND column_name = 'state') THEN
				ALTER TABLE `+a.ident()+` RENAME COLUMN state TO state_id;
			END IF;
		END $$`)
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// CreateTables runs CREATE TABLE IF NOT EXISTS statements in one
// transaction under an advisory lock. Postgres does not make IF NOT EXISTS
// safe against a concurrent session creating the same table (two replicas
// starting at once: one fails on pg_type's unique index), so replicas take
// turns.
func CreateTables(ctx context.Context, db outbox.DB, ddl string) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren examples: create tables'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, ddl)
		return err
	})
}

// Create inserts a work item and publishes workitem.created, shaped as
// Plane's trigger writes it: previous_attributes is the JSON string "{}",
// and data carries the item's assignee_ids and label_ids (none here).
func (a *App) Create(ctx context.Context, tx pgx.Tx, by Actor, w WorkItem) (warren.Event, error) {
	_, err := tx.Exec(ctx, `INSERT INTO `+a.ident()+` (id, workspace_id, project_id, name, state_id, priority)
		VALUES ($1, $2, $3, $4, $5, $6)`, w.ID, w.WorkspaceID, w.ProjectID, w.Name, w.StateID, w.Priority)
	if err != nil {
		return warren.Event{}, fmt.Errorf("create work item %s: %w", w.ID, err)
	}
	return a.publish(ctx, tx, by, TypeCreated, w, json.RawMessage(`"{}"`))
}

// Set changes one attribute ("state_id" or "priority") of a work item and
// publishes its event as Plane's trigger does: workitem.state.updated for
// a state, workitem.updated otherwise, with the old value as text in
// previous_attributes. Setting the value it already has changes nothing
// and publishes nothing (the returned event is zero).
func (a *App) Set(ctx context.Context, tx pgx.Tx, by Actor, id, field, value string) (warren.Event, error) {
	if field != "state_id" && field != "priority" {
		return warren.Event{}, fmt.Errorf("work item field %q cannot be set", field)
	}
	// FOR UPDATE: concurrent changes to one item commit (and so publish)
	// in order, which per-entity ordering in the relay relies on.
	var w WorkItem
	err := tx.QueryRow(ctx, `SELECT id, workspace_id, project_id, name, state_id, priority FROM `+a.ident()+
		` WHERE id = $1 FOR UPDATE`, id).Scan(&w.ID, &w.WorkspaceID, &w.ProjectID, &w.Name, &w.StateID, &w.Priority)
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.Event{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return warren.Event{}, err
	}
	old := map[string]string{"state_id": w.StateID, "priority": w.Priority}[field]
	if old == value {
		return warren.Event{}, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE `+a.ident()+` SET `+field+` = $2, updated_at = now() WHERE id = $1`, id, value); err != nil {
		return warren.Event{}, err
	}
	typ := TypeUpdated
	if field == "state_id" {
		w.StateID, typ = value, TypeStateUpdated
	} else {
		w.Priority = value
	}
	previous, err := json.Marshal(map[string]string{field: old})
	if err != nil {
		return warren.Event{}, err
	}
	return a.publish(ctx, tx, by, typ, w, previous)
}

// Get reads a work item.
func (a *App) Get(ctx context.Context, db outbox.DB, id string) (WorkItem, error) {
	var w WorkItem
	err := db.QueryRow(ctx, `SELECT id, workspace_id, project_id, name, state_id, priority FROM `+a.ident()+` WHERE id = $1`, id).
		Scan(&w.ID, &w.WorkspaceID, &w.ProjectID, &w.Name, &w.StateID, &w.Priority)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return w, err
}

func (a *App) publish(ctx context.Context, tx pgx.Tx, by Actor, typ string, w WorkItem, previous json.RawMessage) (warren.Event, error) {
	// Plane's trigger adds the item's assignees and labels to the row.
	data, err := json.Marshal(struct {
		WorkItem
		AssigneeIDs []string `json:"assignee_ids"`
		LabelIDs    []string `json:"label_ids"`
	}{w, []string{}, []string{}})
	if err != nil {
		return warren.Event{}, err
	}
	ev := warren.Event{
		ID: NewID(), Type: typ, EntityType: "issue", EntityID: w.ID,
		WorkspaceID: w.WorkspaceID, ProjectID: w.ProjectID,
		InitiatorID: by.ID, InitiatorType: by.Type,
		Payload:   warren.Payload{Data: data, PreviousAttributes: previous},
		CreatedAt: time.Now().UTC(), Version: "1.0",
	}
	if _, err := a.Outbox.Publish(ctx, tx, ev); err != nil {
		return warren.Event{}, err
	}
	return ev, nil
}

// NewID returns a random UUID (version 4), the shape of Plane's ids.
func NewID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
