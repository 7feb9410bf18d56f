package automation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup"
	dedupstore "github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/middleware"
)

// Config configures the service. Zero values mean the documented defaults.
type Config struct {
	// Consumer is the consumer's configuration; Name defaults to
	// "automation".
	Consumer consumer.Config
	// RulesTable holds the rules. Default "automation_rules".
	RulesTable string
	// RunsTable records every rule that fired, one row per event and rule.
	// Default "automation_runs".
	RunsTable string
	// DedupTable is the dedup store's table. Default "warren_dedup".
	DedupTable string
	// HandlerTimeout bounds one event's handling. Default 30s.
	HandlerTimeout time.Duration
	// WrapStore, if set, wraps the dedup store the middleware uses, for
	// the consumer of that name: warrenprom's DedupMetrics.Instrument
	// counts and times its calls.
	WrapStore func(store dedup.Store, consumer string) dedup.Store
}

// DefaultName is the consumer's name (and queue) when Config names none.
const DefaultName = "automation"

// Rule is "when a work item's state changes to WhenState, set its priority
// to SetPriority". WhenState is a state's id, as the events carry it in
// state_id (in Plane, the UUID of a row of its states table).
type Rule struct {
	ID          int64
	Name        string
	WhenState   string
	SetPriority string
}

// StateChangeTypes are the events a rule reads: Plane's state change,
// under its current name and its older one (Plane's own state_changed
// trigger reads these two and no other). A state change never comes as
// workitem.updated.
var StateChangeTypes = []string{app.TypeStateUpdated, "issue.state.updated"}

// StateChange is what a rule reads of a state change's data (and of its
// previous_attributes): the work item's state, null when it has none.
// contract/plane's WorkItem is the whole of what Plane writes.
type StateChange struct {
	StateID *string `json:"state_id"`
}

// Service is the automation consumer.
type Service struct {
	*consumer.BaseConsumer
	pool  *pgxpool.Pool
	app   *app.App
	store *dedupstore.Store
	rules string // quoted table names
	runs  string
}

// Actor is the initiator of every change the service makes.
var Actor = app.Actor{ID: "automation", Type: warren.InitiatorSystemAutomation}

// New builds the service on pool. Changes go through a, so each writes its
// follow-up event to a's outbox in the handler's transaction.
func New(cfg Config, pool *pgxpool.Pool, a *app.App) (*Service, error) {
	cfg.Consumer.Name = cmp.Or(cfg.Consumer.Name, DefaultName)
	// The dedup store's state shows in readiness; while it is down,
	// events are deferred without spending attempts.
	storeUp := warren.NewDependency("dedup")
	cfg.Consumer.Dependencies = append(cfg.Consumer.Dependencies, storeUp)
	base, err := consumer.New(cfg.Consumer)
	if err != nil {
		return nil, err
	}
	store, err := dedupstore.New(pool, dedupstore.Config{Table: cfg.DedupTable})
	if err != nil {
		return nil, err
	}
	s := &Service{
		BaseConsumer: base,
		pool:         pool,
		app:          a,
		store:        store,
		rules:        pgx.Identifier{cmp.Or(cfg.RulesTable, "automation_rules")}.Sanitize(),
		runs:         pgx.Identifier{cmp.Or(cfg.RunsTable, "automation_runs")}.Sanitize(),
	}
	var used dedup.Store = store
	if cfg.WrapStore != nil {
		used = cfg.WrapStore(store, cfg.Consumer.Name)
	}
	log := base.Config().Logger
	timeout := cmp.Or(cfg.HandlerTimeout, 30*time.Second)
	s.Use(
		middleware.Recover(),
		middleware.Logging(log, middleware.LoggingOptions{SuccessLevel: slog.LevelDebug}),
		// Filters run before Dedup, so events this service ignores leave
		// no done-mark behind. Plane's automation consumer takes every
		// workitem.* and issue.* event and its rule engine ignores all but
		// these; both ack the rest and do nothing else.
		middleware.PrefixFilter(StateChangeTypes...),
		middleware.SkipInitiators(warren.InitiatorSystemPrefix),
		// The lease outlives the handler's timeout, so a slow handler's
		// event is never taken over; a crashed worker's event waits only
		// that long.
		middleware.Dedup(used, middleware.DedupOptions{Transactional: true, Lease: 2 * timeout, Health: storeUp}),
		middleware.Timeout(timeout),
	)
	s.Handle("", warren.Typed(s.apply))
	return s, nil
}

// Migrate creates the rule, ledger and dedup tables.
func (s *Service) Migrate(ctx context.Context) error {
	if err := s.store.Migrate(ctx); err != nil {
		return err
	}
	return app.CreateTables(ctx, s.pool, `
		CREATE TABLE IF NOT EXISTS `+s.rules+` (
			id bigserial PRIMARY KEY,
			name text NOT NULL,
			when_state text NOT NULL,
			set_priority text NOT NULL);
		CREATE TABLE IF NOT EXISTS `+s.runs+` (
			event_id text NOT NULL,
			rule_id bigint NOT NULL,
			work_item_id text NOT NULL,
			follow_up_event_id text,
			ran_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (event_id, rule_id))`)
}

// AddRule stores a rule and returns it with its id.
func (s *Service) AddRule(ctx context.Context, r Rule) (Rule, error) {
	err := s.pool.QueryRow(ctx, `INSERT INTO `+s.rules+` (name, when_state, set_priority) VALUES ($1, $2, $3) RETURNING id`,
		r.Name, r.WhenState, r.SetPriority).Scan(&r.ID)
	return r, err
}

// Runs returns, per event id, how many rules fired for it, and the ids of
// the follow-up events those runs wrote.
func (s *Service) Runs(ctx context.Context) (byEvent map[string]int, followUps []string, err error) {
	rows, err := s.pool.Query(ctx, `SELECT event_id, coalesce(follow_up_event_id, '') FROM `+s.runs)
	if err != nil {
		return nil, nil, err
	}
	byEvent = map[string]int{}
	var eventID, followUp string
	_, err = pgx.ForEachRow(rows, []any{&eventID, &followUp}, func() error {
		byEvent[eventID]++
		if followUp != "" {
			followUps = append(followUps, followUp)
		}
		return nil
	})
	return byEvent, followUps, err
}

// apply runs the rules that match a state change. Everything it writes goes
// through tx, the dedup store's transaction, and commits with the event's
// done-mark.
//
// It reads the payload as Plane's trigger writes it: data is the whole
// row (to_jsonb, with assignee_ids and label_ids added), and
// previous_attributes holds the changed columns' old values cast to text.
// Nothing but state_id is read (StateChange), so a row with more or other
// columns is never refused for its shape; data whose state_id is not a
// string or null is dead-lettered by warren.Typed, naming the field.
func (s *Service) apply(ctx context.Context, m *warren.Message, now StateChange) error {
	tx, ok := dedupstore.Tx(ctx)
	if !ok {
		return warren.Permanent(errors.New("automation: no transaction in the context; Dedup must run in transactional mode"))
	}
	var before StateChange
	if len(m.Event.Payload.PreviousAttributes) > 0 {
		if err := m.Event.Payload.DecodePreviousAttributes(&before); err != nil {
			return warren.Permanent(err)
		}
	}
	switch {
	case now.StateID == nil:
		// A state change whose row has no state: nothing to match.
		return warren.Skip("the event's data has no state_id")
	case before.StateID != nil && *before.StateID == *now.StateID:
		return warren.Skip("state did not change")
	}
	state := *now.StateID

	rows, err := tx.Query(ctx, `SELECT id, name, when_state, set_priority FROM `+s.rules+` WHERE when_state = $1 ORDER BY id`, state)
	if err != nil {
		return err
	}
	rules, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Rule])
	if err != nil {
		return err
	}
	if len(rules) == 0 {
		return warren.Skip(fmt.Sprintf("no rule for state %q", state))
	}
	for _, r := range rules {
		followUp, err := s.app.Set(ctx, tx, Actor, m.Event.EntityID, "priority", r.SetPriority)
		if errors.Is(err, app.ErrNotFound) {
			// A work item this service's table does not hold (deleted
			// since, or, on Plane's queue, one of Plane's issues): the
			// rule has nothing to change, which no retry mends.
			return warren.Skip(fmt.Sprintf("rule %q: %v", r.Name, err))
		}
		if err != nil {
			return fmt.Errorf("rule %q: %w", r.Name, err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+s.runs+` (event_id, rule_id, work_item_id, follow_up_event_id) VALUES ($1, $2, $3, NULLIF($4, ''))`,
			m.Event.ID, r.ID, m.Event.EntityID, followUp.ID)
		if err != nil {
			return fmt.Errorf("rule %q: record run: %w", r.Name, err)
		}
	}
	return nil
}
