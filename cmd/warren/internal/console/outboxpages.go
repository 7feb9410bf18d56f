package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
)

// deadRowGroup is the dead outbox rows that died of the same error,
// numbers and ids aside. Shown is that error as pages show it: masked
// before it is normalised as well as after, because normalising splits a
// secret (sw0rdfish becomes sw<n>rdfish) into parts the mask no longer
// recognises.
type deadRowGroup struct {
	ID, Shown string
	Rows      []outbox.Row
	Views     []deadRowView
}

// deadRowView is a dead row as the outbox page shows it: its producer
// text masked here, once (see messageView).
type deadRowView struct {
	Row                   int64 // names the row in forms
	EventID, Type, Entity string
	Attempts              int
	FinishedAt            time.Time
	LastError             string
}

func newDeadRowView(row outbox.Row) deadRowView {
	return deadRowView{Row: row.ID, EventID: shownText(row.Event.ID), Type: shownText(row.Event.Type), Entity: shownText(row.Event.EntityID),
		Attempts: row.Attempts, FinishedAt: row.FinishedAt, LastError: shownText(row.LastError)}
}

// deadRows lists up to ScanLimit dead rows, grouped by normalised error.
func (s *Server) deadRows(r *http.Request) ([]outbox.Row, []*deadRowGroup, error) {
	rows, err := s.outbox.Dead(r.Context(), s.db, outbox.Filter{Limit: s.cfg.ScanLimit})
	if err != nil {
		return nil, nil, err
	}
	byErr := map[string]*deadRowGroup{}
	var groups []*deadRowGroup
	for _, row := range rows {
		key := dlq.NormalizeError(row.LastError)
		g := byErr[key]
		if g == nil {
			shown := redact.Secrets(dlq.NormalizeError(redact.Secrets(row.LastError)))
			g = &deadRowGroup{ID: groupID(key), Shown: cmp.Or(shown, "(no error recorded)")}
			byErr[key] = g
			groups = append(groups, g)
		}
		g.Rows, g.Views = append(g.Rows, row), append(g.Views, newDeadRowView(row))
	}
	return rows, groups, nil
}

// outboxPage shows the outbox table's counts and its dead rows by error.
func (s *Server) outboxPage(w http.ResponseWriter, r *http.Request) {
	if s.outbox == nil {
		s.fail(w, r, http.StatusNotFound, errors.New("no outbox: start the console with --database-url"))
		return
	}
	st, err := s.outbox.Stats(r.Context(), s.db)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	rows, groups, err := s.deadRows(r)
	var noDeadRows string
	switch {
	case errors.Is(err, outbox.ErrPlaneMigrationNeeded):
		// Plane's table keeps no dead rows until warren's optional
		// columns are added; the counts above still hold.
		noDeadRows = "Plane's outbox table records no dead rows until 'warren outbox migrate --schema plane' adds warren's columns."
	case err != nil:
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	s.render(w, r, http.StatusOK, "outbox", "Outbox "+s.outbox.Name(), struct {
		Table      string
		Database   string
		Stats      outbox.Stats
		Oldest     string
		Groups     []*deadRowGroup
		Listed     int
		NoDeadRows string
	}{s.outbox.Name(), s.dbShown, st, duration(st.OldestPendingAge), groups, len(rows), noDeadRows})
}

// redrive is the POST that makes dead rows pending again: a dry run and
// confirmation page first, as for every action.
func (s *Server) redrive(w http.ResponseWriter, r *http.Request) {
	if s.outbox == nil {
		s.fail(w, r, http.StatusNotFound, errors.New("no outbox: start the console with --database-url"))
		return
	}
	if id := r.PostFormValue("plan"); id != "" {
		s.confirmed(w, r, opRedrive, id)
		return
	}
	rows, groups, err := s.deadRows(r)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	p := plan{Op: opRedrive, Total: len(rows)}
	// The plan names the rows themselves (their ids), as this dry run read
	// them: a row that dies after it is not redriven, whatever the scope.
	var picked []outbox.Row
	switch scope := r.PostFormValue("scope"); scope {
	case "all":
		p.Scope, picked = "every dead row", rows
		// The page reads at most ScanLimit rows: say so when there are
		// more, rather than call the oldest ones "every".
		if len(rows) == s.cfg.ScanLimit {
			all, err := s.outbox.CountDead(r.Context(), s.db, outbox.Filter{})
			if err != nil {
				s.fail(w, r, http.StatusBadGateway, err)
				return
			}
			if all > int64(len(rows)) {
				p.Scope = fmt.Sprintf("the oldest %d of the %d dead rows (at most --scan-limit at a time)", len(rows), all)
			}
		}
	case "group":
		for _, g := range groups {
			if g.ID == r.PostFormValue("group") {
				picked = g.Rows
				p.Scope = fmt.Sprintf("the dead rows that failed with %q", g.Shown)
			}
		}
	case "selected":
		for _, row := range rows { // counted only if still dead
			if slices.Contains(r.PostForm["row"], strconv.FormatInt(row.ID, 10)) || slices.Contains(r.PostForm["id"], row.Event.ID) {
				picked = append(picked, row)
			}
		}
		p.Scope = "the selected dead rows"
	default:
		s.fail(w, r, http.StatusBadRequest, errors.New("redrive what? (scope all, group or selected)"))
		return
	}
	if len(picked) == 0 && r.PostFormValue("scope") != "all" {
		s.fail(w, r, http.StatusBadRequest, errors.New("no dead row selected (they may have been redriven already)"))
		return
	}
	for _, row := range picked {
		p.Outbox.IDs = append(p.Outbox.IDs, row.ID)
		p.count(row.Event.ID)
	}
	// With no rows picked, Count is 0 and no plan is kept to confirm (an
	// empty IDs would select every dead row).
	p.Count, p.Outbox.Limit = len(picked), len(picked)
	s.confirm(w, r, p)
}
