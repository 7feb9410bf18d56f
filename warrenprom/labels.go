package warrenprom

import (
	"sync"
	"unicode/utf8"

	"github.com/warrenmq/warren/warrenprom/internal/promreg"
)

// ErrNilRegisterer is returned by the constructors when given no
// registerer: warren registers nothing globally unless told to.
var ErrNilRegisterer = promreg.ErrNilRegisterer

// Label values the event_type label takes besides event types.
const (
	// OtherEventType counts event types past MaxEventTypes, over 100
	// bytes, or not valid UTF-8.
	OtherEventType = "other"
	// UnknownEventType counts deliveries whose body did not decode.
	UnknownEventType = "unknown"
)

// maxLabelLen bounds an event type used as a label value; a longer one is
// not a type a dashboard can show.
const maxLabelLen = 100

// eventTypes admits the first max distinct event types as label values;
// later ones become OtherEventType. The set never shrinks, so a label
// value keeps meaning one thing for the life of the process.
type eventTypes struct {
	max      int
	mu       sync.Mutex
	admitted map[string]struct{}
}

func newEventTypes(max int) *eventTypes {
	return &eventTypes{max: max, admitted: map[string]struct{}{}}
}

func (e *eventTypes) label(eventType string) string {
	switch {
	case eventType == "":
		return UnknownEventType
	case len(eventType) > maxLabelLen || !utf8.ValidString(eventType):
		return OtherEventType
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.admitted[eventType]; ok {
		return eventType
	}
	if len(e.admitted) >= e.max {
		return OtherEventType
	}
	e.admitted[eventType] = struct{}{}
	return eventType
}
