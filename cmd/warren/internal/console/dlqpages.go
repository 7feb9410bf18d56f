package console

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/dlqtool"
)

// queueView is what the pages of one dead-letter queue share.
type queueView struct {
	Name, Consumer string
	Depth          int // messages in the queue
	Read           int // messages read to build the page
	CanPurge       bool
}

// readQueue reads up to ScanLimit messages of the dead-letter queue the
// request names (a consumer's name or a DLQ's), without changing it. Each
// message is kept with its fingerprint and, only when bodies, its body:
// the group pages show none, and a DLQ of large dead letters would
// otherwise cost its bytes in memory for every page view.
func (s *Server) readQueue(w http.ResponseWriter, r *http.Request, filter dlqtool.Filter, bodies bool) (queueView, []read, error) {
	slow(w, 10*time.Minute)
	var v queueView
	var msgs []read
	keep := func(m *dlqtool.Message) {
		c := read{Message: *m, Fingerprint: m.Fingerprint()}
		if !bodies {
			c.Body = nil
		}
		msgs = append(msgs, c)
	}
	err := s.broker.withQueue(r.Context(), r.PathValue("queue"), func(q *dlqtool.Queue) error {
		v.Name, v.Consumer, v.CanPurge = q.Name(), q.Consumer(), s.cfg.ArchiveDir != ""
		var err error
		if v.Depth, err = q.Count(r.Context()); err != nil {
			return err
		}
		_, err = q.Peek(r.Context(), dlqtool.PeekOptions{Filter: filter, Limit: s.cfg.ScanLimit, Each: keep})
		v.Read = len(msgs)
		return err
	})
	return v, msgs, err
}

// read is a message as readQueue keeps it: its fingerprint taken while
// it had its body, which it may no longer have.
type read struct {
	dlqtool.Message
	Fingerprint string
}

// queueError is the status for an error reading a queue.
func queueError(err error) int {
	if errors.Is(err, dlqtool.ErrNoQueue) {
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

// dlqGroups is a dead-letter queue's page: its messages grouped by
// failure signature.
func (s *Server) dlqGroups(w http.ResponseWriter, r *http.Request) {
	v, msgs, err := s.readQueue(w, r, dlqtool.Filter{}, false)
	if err != nil {
		s.fail(w, r, queueError(err), err)
		return
	}
	groups := groupMessages(msgs)
	for _, g := range groups {
		g.Messages = nil // the page shows counts only
		s.signatures.putAt(g.ID, signature{g.Signature, g.Shown})
	}
	s.render(w, r, http.StatusOK, "groups", v.Name, struct {
		Queue  queueView
		Groups []*group
	}{v, groups})
}

// dlqGroup is one group's page: its messages, to select and act on.
func (s *Server) dlqGroup(w http.ResponseWriter, r *http.Request) {
	v, msgs, err := s.readQueue(w, r, dlqtool.Filter{}, false)
	if err != nil {
		s.fail(w, r, queueError(err), err)
		return
	}
	for _, g := range groupMessages(msgs) {
		if g.ID == r.PathValue("group") {
			s.signatures.putAt(g.ID, signature{g.Signature, g.Shown})
			views := make([]messageView, len(g.Messages))
			for i := range g.Messages {
				views[i] = newMessageView(&g.Messages[i], false)
			}
			s.render(w, r, http.StatusOK, "group", v.Name+": "+g.Shown, struct {
				Queue    queueView
				Group    *group
				Messages []messageView
			}{v, g, views})
			return
		}
	}
	s.fail(w, r, http.StatusNotFound, errors.New("no such group in "+v.Name+" (its messages may have been replayed or purged)"))
}

// dlqMessage is one message's page, found by event id (?id=), by its
// fingerprint (?fingerprint=) or by its position in the queue (?pos=),
// which changes as messages ahead of it leave.
func (s *Server) dlqMessage(w http.ResponseWriter, r *http.Request) {
	id, hasID := r.URL.Query()["id"]
	var filter dlqtool.Filter
	pos, fp := -1, ""
	switch {
	case hasID && len(id) == 1:
		filter.EventIDs = id
	case r.URL.Query().Has("fingerprint"):
		fp = r.URL.Query().Get("fingerprint")
	case r.URL.Query().Has("pos"):
		var err error
		if pos, err = strconv.Atoi(r.URL.Query().Get("pos")); err != nil || pos < 0 {
			s.fail(w, r, http.StatusBadRequest, errors.New("pos must be a position in the queue, 0 at the head"))
			return
		}
	default:
		s.fail(w, r, http.StatusBadRequest, errors.New("name a message by ?id=EVENT_ID or ?pos=N"))
		return
	}
	v, msgs, err := s.readQueue(w, r, filter, true)
	if err != nil {
		s.fail(w, r, queueError(err), err)
		return
	}
	var found []messageView
	for _, m := range msgs {
		if pos >= 0 && m.Position != pos {
			continue
		}
		if fp != "" && m.Fingerprint != fp {
			continue
		}
		found = append(found, newMessageView(&m, true))
	}
	if len(found) == 0 {
		s.fail(w, r, http.StatusNotFound, errors.New("no such message in "+v.Name+" (it may have been replayed or purged)"))
		return
	}
	s.render(w, r, http.StatusOK, "message", v.Name+": "+shownText(strings.Join(id, "")), struct {
		Queue    queueView
		Messages []messageView
	}{v, found})
}

// openQueue sends the overview's "open a dead-letter queue" form to its
// page.
func (s *Server) openQueue(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.URL.Query().Get("queue"))
	if name == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/dlq/"+pathEscape(name), http.StatusSeeOther)
}
