package pipeline

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/examples/automation"
	"github.com/warrenmq/warren/internal/amqpx"
)

// Workload is a stream of application changes with a known outcome.
type Workload struct {
	// UserItems are created by a user and moved todo → in_progress → done;
	// the automation rule then lowers each one's priority.
	UserItems int
	// ImportedItems are created by a user and marked done by an import
	// (SYSTEM.IMPORT): the automation must skip those.
	ImportedItems int
	// Poison adds one item the webhook receiver refuses (400): it must end
	// in the webhook's DLQ and nowhere else.
	Poison bool
	// Every is the pause between application transactions.
	Every time.Duration
}

// PoisonName marks the poison item; ReceiverAnswer refuses its events.
const PoisonName = "Poison pill"

// Expect is what a workload must lead to.
type Expect struct {
	Written      int // events the application wrote
	FollowUps    int // events the automation rule writes
	Delivered    int // distinct events the receiver must accept
	RuleRuns     int
	DeadLettered int
	PoisonID     string
	// Events are the events the application wrote, in order.
	Events []warren.Event
}

// Rule is the automation rule every workload runs against.
var Rule = automation.Rule{Name: "done work is not urgent", WhenState: "done", SetPriority: "none"}

// Produce writes the workload through the application and returns what it
// must lead to.
func (p *Pipeline) Produce(ctx context.Context, w Workload) (Expect, error) {
	var exp Expect
	if _, err := p.Automation.AddRule(ctx, Rule); err != nil {
		return exp, err
	}
	user := app.Actor{ID: "user-1", Type: warren.InitiatorUser}
	importer := app.Actor{ID: "import-7", Type: warren.InitiatorSystemImport}
	var written []warren.Event
	change := func(f func(tx pgx.Tx) ([]warren.Event, error)) error {
		var evs []warren.Event
		err := p.Change(ctx, func(tx pgx.Tx) (err error) {
			evs, err = f(tx)
			return err
		})
		written = append(written, evs...)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.Every):
		}
		return err
	}
	item := func(i int, kind string) app.WorkItem {
		return app.WorkItem{
			ID: fmt.Sprintf("%s-%03d", kind, i), WorkspaceID: "ws-1", ProjectID: "proj-1",
			Name: fmt.Sprintf("%s item %d", kind, i), StateID: "todo", Priority: "high",
		}
	}
	for i := range w.UserItems {
		it := item(i, "user")
		for _, step := range []func(tx pgx.Tx) (warren.Event, error){
			func(tx pgx.Tx) (warren.Event, error) { return p.App.Create(ctx, tx, user, it) },
			func(tx pgx.Tx) (warren.Event, error) {
				return p.App.Set(ctx, tx, user, it.ID, "state_id", "in_progress")
			},
			func(tx pgx.Tx) (warren.Event, error) { return p.App.Set(ctx, tx, user, it.ID, "state_id", "done") },
		} {
			if err := change(func(tx pgx.Tx) ([]warren.Event, error) {
				ev, err := step(tx)
				return []warren.Event{ev}, err
			}); err != nil {
				return exp, err
			}
		}
	}
	for i := range w.ImportedItems {
		it := item(i, "imported")
		if err := change(func(tx pgx.Tx) ([]warren.Event, error) {
			created, err := p.App.Create(ctx, tx, user, it)
			if err != nil {
				return nil, err
			}
			done, err := p.App.Set(ctx, tx, importer, it.ID, "state_id", "done")
			return []warren.Event{created, done}, err
		}); err != nil {
			return exp, err
		}
	}
	if w.Poison {
		it := item(0, "poison")
		it.Name = PoisonName
		if err := change(func(tx pgx.Tx) ([]warren.Event, error) {
			ev, err := p.App.Create(ctx, tx, user, it)
			exp.PoisonID = ev.ID
			return []warren.Event{ev}, err
		}); err != nil {
			return exp, err
		}
	}

	exp.Events = written
	exp.Written = len(written)
	exp.FollowUps = w.UserItems
	exp.RuleRuns = w.UserItems
	exp.Delivered = exp.Written + exp.FollowUps
	if w.Poison {
		exp.Delivered--
		exp.DeadLettered = 1
	}
	return exp, nil
}

// HandledByBoth returns the first n of evs that both consumers handle, and
// so must answer "duplicate" for when redelivered: users' state changes.
// The automation acks every other event unread, before its dedup.
func HandledByBoth(evs []warren.Event, n int) []warren.Event {
	var out []warren.Event
	for _, ev := range evs {
		if len(out) < n && slices.Contains(automation.StateChangeTypes, ev.Type) && !ev.IsSystemInitiated() {
			out = append(out, ev)
		}
	}
	return out
}

// Redeliver re-publishes copies of events straight to the exchange, the way
// a broker redelivers after a consumer crash or a relay publishes twice
// after a lost settle. Consumers that already handled them must answer
// "duplicate".
func (p *Pipeline) Redeliver(ctx context.Context, evs []warren.Event) error {
	for _, ev := range evs {
		msg, err := amqpx.EventPublishing(ev)
		if err != nil {
			return err
		}
		if err := Publish(ctx, p.cfg.AMQPURL, p.cfg.Names.Exchange, msg); err != nil {
			return err
		}
	}
	return nil
}

// FlakyAnswer is a receiver that refuses the poison item's events with 400
// and answers 503 to the first delivery of about one event in seven, so the
// demo shows a permanent failure and retries.
func FlakyAnswer(eventID string, body []byte, seen int) int {
	if strings.Contains(string(body), PoisonName) {
		return 400
	}
	if seen == 0 && crc32.ChecksumIEEE([]byte(eventID))%7 == 0 {
		return 503
	}
	return 200
}
