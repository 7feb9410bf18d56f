package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"

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
		g.Rows = append(g.Rows, row)
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
	switch scope := r.PostFormValue("scope"); scope {
	case "all":
		// Oldest first, at most as many as counted: rows that die after
		// the dry run are not redriven.
		p.Scope, p.Count, p.Outbox = "every dead row", len(rows), outbox.Filter{Limit: len(rows)}
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
	case "group", "selected":
		var ids []string
		if scope == "group" {
			for _, g := range groups {
				if g.ID == r.PostFormValue("group") {
					for _, row := range g.Rows {
						ids = append(ids, row.Event.ID)
					}
					p.Scope = fmt.Sprintf("the dead rows that failed with %q", g.Shown)
				}
			}
		} else {
			dead := map[string]bool{}
			for _, row := range rows {
				dead[row.Event.ID] = true
			}
			for _, id := range r.PostForm["id"] {
				if dead[id] { // counted only if still dead
					ids = append(ids, id)
				}
			}
			p.Scope = "the selected dead rows"
		}
		if len(ids) == 0 {
			s.fail(w, r, http.StatusBadRequest, errors.New("no dead row selected (they may have been redriven already)"))
			return
		}
		p.Count, p.Outbox = len(ids), outbox.Filter{EventIDs: ids, Limit: len(ids)}
	default:
		s.fail(w, r, http.StatusBadRequest, errors.New("redrive what? (scope all, group or selected)"))
		return
	}
	s.confirm(w, r, p)
}
