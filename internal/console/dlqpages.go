package console

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/redact"
)

// queueView is what the pages of one dead-letter queue share.
type queueView struct {
	Name, Consumer string
	Depth          int // messages in the queue
	Read           int // messages read to build the page
	CanPurge       bool
}

// readQueue reads up to ScanLimit messages of the dead-letter queue the
// request names (a consumer's name or a DLQ's), without changing it.
func (s *Server) readQueue(w http.ResponseWriter, r *http.Request, filter dlqtool.Filter) (queueView, []dlqtool.Message, error) {
	slow(w, 10*time.Minute)
	var v queueView
	var msgs []dlqtool.Message
	err := s.broker.withQueue(r.Context(), r.PathValue("queue"), func(q *dlqtool.Queue) error {
		v.Name, v.Consumer, v.CanPurge = q.Name(), q.Consumer(), s.cfg.ArchiveDir != ""
		var err error
		if v.Depth, err = q.Count(r.Context()); err != nil {
			return err
		}
		msgs, err = q.Peek(r.Context(), dlqtool.PeekOptions{Filter: filter, Limit: s.cfg.ScanLimit})
		v.Read = len(msgs)
		return err
	})
	return v, msgs, err
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
	v, msgs, err := s.readQueue(w, r, dlqtool.Filter{})
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
	v, msgs, err := s.readQueue(w, r, dlqtool.Filter{})
	if err != nil {
		s.fail(w, r, queueError(err), err)
		return
	}
	for _, g := range groupMessages(msgs) {
		if g.ID == r.PathValue("group") {
			s.signatures.putAt(g.ID, signature{g.Signature, g.Shown})
			s.render(w, r, http.StatusOK, "group", v.Name+": "+g.Shown, struct {
				Queue queueView
				Group *group
			}{v, g})
			return
		}
	}
	s.fail(w, r, http.StatusNotFound, errors.New("no such group in "+v.Name+" (its messages may have been replayed or purged)"))
}

// messageView is one dead message as its page shows it.
type messageView struct {
	dlqtool.Message
	Signature string // as shown: see shownSignature
	GroupID   string
	Error     string
	Headers   []header
	Body      body
	Deaths    []dlq.Death
}

// dlqMessage is one message's page, found by event id (?id=) or, for a
// message without one, by its position in the queue (?pos=), which
// changes as messages ahead of it leave.
func (s *Server) dlqMessage(w http.ResponseWriter, r *http.Request) {
	id, hasID := r.URL.Query()["id"]
	var filter dlqtool.Filter
	pos := -1
	switch {
	case hasID && len(id) == 1:
		filter.EventIDs = id
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
	v, msgs, err := s.readQueue(w, r, filter)
	if err != nil {
		s.fail(w, r, queueError(err), err)
		return
	}
	var found []messageView
	for _, m := range msgs {
		if pos >= 0 && m.Position != pos {
			continue
		}
		sig := m.Signature()
		found = append(found, messageView{
			Message: m, Signature: shownSignature(&m), GroupID: groupID(sig), Error: redact.Secrets(m.Metadata.Error),
			Headers: headerRows(m.Headers), Body: bodyView(m.Body), Deaths: m.Metadata.Deaths,
		})
	}
	if len(found) == 0 {
		s.fail(w, r, http.StatusNotFound, errors.New("no such message in "+v.Name+" (it may have been replayed or purged)"))
		return
	}
	s.render(w, r, http.StatusOK, "message", v.Name+": "+strings.Join(id, ""), struct {
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
