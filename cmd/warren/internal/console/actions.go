package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
)

// The actions.
const (
	opReplay  = "replay"
	opPurge   = "purge"
	opExport  = "export"
	opRedrive = "redrive"
)

// actionTimeout bounds a confirmed action. Stopped by it, an action leaves
// what it did not get to where it was (dlqtool's guarantee) and its result
// page says how far it got.
const actionTimeout = time.Hour

// plan is an action as its dry run counted it, kept on the server until
// the operator confirms it (or it expires). Confirming acts on exactly the
// messages (or rows) the dry run counted: their fingerprints (or row
// ids) are in Filter (or Outbox), so a form cannot widen it, and a message
// that arrives after the dry run, or a row that dies after it, is not
// touched even when it matches the scope; the result page counts those.
type plan struct {
	Op     string
	Queue  string         // the DLQ; empty for a redrive
	Scope  string         // what the operator picked, in words
	Filter dlqtool.Filter // with the Fingerprints of the messages counted
	Outbox outbox.Filter  // for a redrive: the ids of the rows counted
	Count  int            // what the dry run counted
	Total  int            // messages in the queue, or dead rows
	To     string         // where a replay sends them
	// Foreign counts replayed messages whose headers name another origin
	// queue (ignored: headers can be forged).
	Foreign int
	// IDs are the event ids of the first messages (or rows) counted, as
	// pages show them (masked), for the confirmation page to list; MoreIDs
	// counts the rest.
	IDs     []string
	MoreIDs int
}

// shownIDs bounds plan.IDs: a confirmation page names what it will act on
// without listing a whole queue.
const shownIDs = 20

// count adds one counted message's (or row's) event id to the list the
// confirmation page shows.
func (p *plan) count(eventID string) {
	if len(p.IDs) < shownIDs {
		p.IDs = append(p.IDs, shownText(eventID))
	} else {
		p.MoreIDs++
	}
}

// forget drops what a plan holds only to be acted on or confirmed (the
// fingerprints, row ids and event ids counted), once its action has ended:
// a result is kept for a day, and a queue's worth of them is memory, and
// ids, for nothing.
func (p *plan) forget() {
	p.Filter.Fingerprints, p.Filter.EventIDs, p.Outbox.IDs, p.Outbox.EventIDs, p.IDs = nil, nil, nil, nil, nil
}

// outcome is what an action did, or has done so far, shown on its result
// page.
type outcome struct {
	Plan    plan
	Running bool // still going: the page reloads itself until it ends
	Scanned int  // messages looked at so far (a replay or purge reads the queue in order)
	Done    int
	// Unlisted counts messages of the scope the action met but the dry
	// run had not counted (they arrived later): left where they were.
	Unlisted int
	Archive  string // the file a purge wrote first
	Err      string
	At       time.Time
}

// job is a confirmed action running in the background, so that its result
// page can show how far it has got while it runs.
type job struct {
	mu sync.Mutex
	o  outcome
}

func (j *job) snapshot() outcome {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.o
}

func (j *job) update(f func(*outcome)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f(&j.o)
}

// progress is the dlqtool callback that shows a running action's counts.
func (j *job) progress(p dlqtool.Progress) {
	j.update(func(o *outcome) { o.Scanned, o.Done, o.Unlisted = p.Scanned, p.Done, p.Unlisted })
}

// Failed is how many of the planned messages the action did not get to
// because it stopped on an error.
func (o outcome) Failed() int {
	if o.Err == "" {
		return 0
	}
	return max(o.Plan.Count-o.Done, 0)
}

// Gone is how many of the planned messages were no longer there when the
// action ran (another operator or tool took them meanwhile).
func (o outcome) Gone() int {
	if o.Err != "" {
		return 0
	}
	return max(o.Plan.Count-o.Done, 0)
}

// verb is the past tense of an action, for result pages.
func (o outcome) Verb() string {
	return map[string]string{opReplay: "replayed", opPurge: "purged", opExport: "exported", opRedrive: "redrove"}[o.Plan.Op]
}

// filterFromForm reads what an action's form selected: a group (its id,
// group), event ids (id, repeated), or both; or one message (fingerprint,
// from its page: an event id may be shared, or padded so that it looks like
// another's). Ids are taken as they are, never trimmed: " evt-1" is
// another message's id than "evt-1". Selecting nothing is refused:
// an empty filter would select the whole queue. The form names a group by
// id, and the console keeps the signature behind it from when it showed
// the group, so that a signature (error text, which may hold what
// redact.Secrets masks on the page) is never in a page's source.
func (s *Server) filterFromForm(r *http.Request) (dlqtool.Filter, string, error) {
	var f dlqtool.Filter
	var scope []string
	if id := r.PostFormValue("group"); id != "" {
		sig, ok := s.signatures.get(id)
		if !ok {
			return f, "", errors.New("the console no longer knows this group (the page is over an hour old, or the console restarted): reload the page; nothing was changed")
		}
		f.Signatures = []string{sig.value}
		scope = append(scope, fmt.Sprintf("failure signature %q", sig.shown))
	}
	switch fps := r.PostForm["fingerprint"]; {
	case len(fps) == 0:
	case r.PostFormValue("scope") == "message":
		f.Fingerprints = fps
		scope = append(scope, "the message shown on its page")
	case r.PostFormValue("scope") == "selected":
		f.Fingerprints = fps
		scope = append(scope, fmt.Sprintf("%d selected messages", len(fps)))
	}
	if r.PostFormValue("scope") != "group" {
		for _, id := range r.PostForm["id"] {
			if id != "" {
				f.EventIDs = append(f.EventIDs, id)
			}
		}
		if len(f.EventIDs) > 0 {
			scope = append(scope, fmt.Sprintf("%d selected event ids", len(f.EventIDs)))
		} else if r.PostFormValue("scope") == "selected" && len(f.Fingerprints) == 0 {
			return f, "", errors.New("no message selected: tick the messages to act on")
		}
	}
	if f.IsZero() {
		return f, "", errors.New("the form selected no group and no message")
	}
	return f, strings.Join(scope, ", "), nil
}

// dlqAction is the POST of a replay, purge or export: without a plan
// field, a dry run and a confirmation page; with one, the action itself.
func (s *Server) dlqAction(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if id := r.PostFormValue("plan"); id != "" {
			s.confirmed(w, r, op, id)
			return
		}
		if op == opPurge && s.cfg.ArchiveDir == "" {
			s.fail(w, r, http.StatusForbidden, errors.New("purging needs an archive directory (warren console --archive-dir): a purge writes the messages there first"))
			return
		}
		f, scope, err := s.filterFromForm(r)
		if err != nil {
			s.fail(w, r, http.StatusBadRequest, err)
			return
		}
		p := plan{Op: op, Scope: scope, Filter: f}
		// The confirmed action takes exactly what this dry run counts
		// (one of the form's fingerprints counts once per copy found).
		p.Filter.Fingerprints = nil
		listed := func(m *dlqtool.Message) {
			p.Filter.Fingerprints = append(p.Filter.Fingerprints, m.Fingerprint())
			p.count(m.EventID)
		}
		slow(w, 10*time.Minute)
		err = s.broker.withQueue(r.Context(), r.PathValue("queue"), func(q *dlqtool.Queue) error {
			p.Queue = q.Name()
			var res dlqtool.Result
			var err error
			if op == opReplay {
				res, err = q.Replay(r.Context(), dlqtool.ReplayOptions{Filter: f, DryRun: true, OnMatch: listed})
				p.To = strings.Join(slices.Sorted(mapKeys(res.Queues)), ", ")
				p.Foreign = res.ForeignOrigin
			} else {
				// A purge's dry run counts without touching anything;
				// it serves an export as well.
				res, err = q.Purge(r.Context(), dlqtool.PurgeOptions{Filter: f, DryRun: true, OnMatch: listed})
			}
			p.Count, p.Total = res.Matched, res.Total
			return err
		})
		if err != nil {
			s.fail(w, r, queueError(err), err)
			return
		}
		s.confirm(w, r, p)
	}
}

// confirm renders the dry run's page, with the plan stored to be
// confirmed.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request, p plan) {
	var id string
	if p.Count > 0 {
		id = s.plans.put(p)
	}
	s.render(w, r, http.StatusOK, "confirm", "Confirm "+p.Op, struct {
		Plan   plan
		PlanID string
		Action string
	}{p, id, p.action()})
}

// action is the path a plan's confirmation posts to, built from the queue's
// name escaped: the request's path is unescaped, and a name holding '?',
// '#', '/' or '%' would post elsewhere.
func (p plan) action() string {
	if p.Op == opRedrive {
		return "/outbox/redrive"
	}
	return "/dlq/" + pathEscape(p.Queue) + "/" + p.Op
}

// confirmed starts the plan id, once, and redirects to its result page,
// which shows its progress until it ends. An export is not started but
// streamed: it is the response.
func (s *Server) confirmed(w http.ResponseWriter, r *http.Request, op, id string) {
	p, ok := s.plans.take(id)
	if !ok || p.Op != op || (op != opRedrive && r.PathValue("queue") != p.Queue && r.PathValue("queue")+".dlq" != p.Queue) {
		s.fail(w, r, http.StatusConflict, errors.New("this confirmation was already used or has expired: nothing was done now; start again from the queue's page"))
		return
	}
	// The action runs to its end even if the browser goes away: an
	// interrupted replay loses nothing, but an operator who closed the tab
	// should not have to guess how far it got. Serve's shutdown still
	// stops it, and so does actionTimeout: a broker that stalls a replay
	// (a memory alarm blocks its publishes) must not hold the queue's lock,
	// and with it every page of the queue, for good.
	ctx, cancel := context.WithTimeout(s.base, actionTimeout)
	if op == opExport {
		defer cancel()
		slow(w, actionTimeout)
		s.export(ctx, w, r, p)
		return
	}
	j := &job{o: outcome{Plan: p, Running: true, At: time.Now()}}
	jobID := s.outcomes.put(j)
	s.jobs.Go(func() {
		defer cancel()
		s.run(ctx, j)
	})
	http.Redirect(w, r, "/results/"+jobID, http.StatusSeeOther)
}

// run does a confirmed action and records its outcome in j.
func (s *Server) run(ctx context.Context, j *job) {
	p := j.snapshot().Plan
	var done int
	var archive string
	var err error
	switch p.Op {
	case opReplay:
		err = s.broker.withOwnConnection(ctx, p.Queue, func(q *dlqtool.Queue) error {
			res, err := q.Replay(ctx, dlqtool.ReplayOptions{Filter: p.Filter, Limit: p.Count, Progress: j.progress})
			done = res.Done
			return err
		})
	case opPurge:
		err = s.broker.withOwnConnection(ctx, p.Queue, func(q *dlqtool.Queue) error {
			archive, done, err = s.archiveAndPurge(ctx, q, p, j.progress)
			return err
		})
	case opRedrive:
		var n int64
		n, err = s.outbox.Redrive(ctx, s.db, p.Outbox)
		done = int(n)
	}
	j.update(func(o *outcome) {
		o.Running, o.Done, o.Archive = false, done, archive
		o.Plan.forget()
		if err != nil {
			o.Err = redact.Secrets(err.Error())
		}
	})
	if err != nil {
		s.cfg.Logger.Error("console action failed", "op", p.Op, "queue", p.Queue, "done", done, "error", redact.Error(err))
	} else {
		s.cfg.Logger.Info("console action", "op", p.Op, "queue", p.Queue, "scope", p.Scope, "done", done)
	}
}

// result shows an action's outcome.
func (s *Server) result(w http.ResponseWriter, r *http.Request) {
	j, ok := s.outcomes.get(r.PathValue("id"))
	if !ok {
		s.fail(w, r, http.StatusNotFound, errors.New("no such result (results are kept for a while, then forgotten)"))
		return
	}
	s.render(w, r, http.StatusOK, "result", "Result", j.snapshot())
}

// export streams the plan's messages as JSON Lines, as `warren dlq export`
// writes them.
func (s *Server) export(ctx context.Context, w http.ResponseWriter, r *http.Request, p plan) {
	name := fmt.Sprintf("%s-%s.jsonl", p.Queue, time.Now().UTC().Format("20060102T150405Z"))
	w.Header().Set("Content-Type", "application/jsonl; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", safeFileName(name)))
	var n int
	err := s.broker.withOwnConnection(ctx, p.Queue, func(q *dlqtool.Queue) error {
		var err error
		n, err = q.Export(ctx, w, dlqtool.ExportOptions{Filter: p.Filter, Limit: p.Count})
		return err
	})
	if err == nil && n == p.Count {
		return
	}
	if err == nil {
		err = fmt.Errorf("exported %d of the %d messages confirmed: the others left the queue meanwhile", n, p.Count)
	}
	// The status is sent, and a download that ended cleanly would look
	// complete: the response is cut off instead (no final chunk), which
	// the browser shows as a failed download. The log says why.
	s.cfg.Logger.Error("console export failed", "queue", p.Queue, "exported", n, "confirmed", p.Count, "error", redact.Error(err))
	http.NewResponseController(w).Flush() // the lines exported arrive whole, then the cut
	panic(http.ErrAbortHandler)
}

func mapKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
