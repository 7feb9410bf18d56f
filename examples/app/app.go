package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox"
)

// WorkItem is the business row.
type WorkItem struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	ProjectID   string `json:"project_id"`
	Name        string `json:"name"`
	State       string `json:"state"`
	Priority    string `json:"priority"`
}

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
		state text NOT NULL,
		priority text NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now())`)
}

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

// Create inserts a work item and publishes workitem.created.
func (a *App) Create(ctx context.Context, tx pgx.Tx, by Actor, w WorkItem) (warren.Event, error) {
	_, err := tx.Exec(ctx, `INSERT INTO `+a.ident()+` (id, workspace_id, project_id, name, state, priority)
		VALUES ($1, $2, $3, $4, $5, $6)`, w.ID, w.WorkspaceID, w.ProjectID, w.Name, w.State, w.Priority)
	if err != nil {
		return warren.Event{}, fmt.Errorf("create work item %s: %w", w.ID, err)
	}
	return a.publish(ctx, tx, by, "workitem.created", w, nil)
}

// Set changes one attribute ("state" or "priority") of a work item and
// publishes workitem.updated with the old value in previous_attributes.
// Setting the value it already has changes nothing and publishes nothing
// (the returned event is zero).
func (a *App) Set(ctx context.Context, tx pgx.Tx, by Actor, id, field, value string) (warren.Event, error) {
	if field != "state" && field != "priority" {
		return warren.Event{}, fmt.Errorf("work item field %q cannot be set", field)
	}
	// FOR UPDATE: concurrent changes to one item commit (and so publish)
	// in order, which per-entity ordering in the relay relies on.
	var w WorkItem
	err := tx.QueryRow(ctx, `SELECT id, workspace_id, project_id, name, state, priority FROM `+a.ident()+
		` WHERE id = $1 FOR UPDATE`, id).Scan(&w.ID, &w.WorkspaceID, &w.ProjectID, &w.Name, &w.State, &w.Priority)
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.Event{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return warren.Event{}, err
	}
	old := map[string]string{"state": w.State, "priority": w.Priority}[field]
	if old == value {
		return warren.Event{}, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE `+a.ident()+` SET `+field+` = $2, updated_at = now() WHERE id = $1`, id, value); err != nil {
		return warren.Event{}, err
	}
	if field == "state" {
		w.State = value
	} else {
		w.Priority = value
	}
	return a.publish(ctx, tx, by, "workitem.updated", w, map[string]string{field: old})
}

// Get reads a work item.
func (a *App) Get(ctx context.Context, db outbox.DB, id string) (WorkItem, error) {
	var w WorkItem
	err := db.QueryRow(ctx, `SELECT id, workspace_id, project_id, name, state, priority FROM `+a.ident()+` WHERE id = $1`, id).
		Scan(&w.ID, &w.WorkspaceID, &w.ProjectID, &w.Name, &w.State, &w.Priority)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return w, err
}

func (a *App) publish(ctx context.Context, tx pgx.Tx, by Actor, typ string, w WorkItem, previous map[string]string) (warren.Event, error) {
	data, err := json.Marshal(w)
	if err != nil {
		return warren.Event{}, err
	}
	prev, err := json.Marshal(previous)
	if err != nil {
		return warren.Event{}, err
	}
	ev := warren.Event{
		ID: NewID(), Type: typ, EntityType: "issue", EntityID: w.ID,
		WorkspaceID: w.WorkspaceID, ProjectID: w.ProjectID,
		InitiatorID: by.ID, InitiatorType: by.Type,
		Payload:   warren.Payload{Data: data, PreviousAttributes: prev},
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
