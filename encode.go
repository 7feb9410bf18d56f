package warren

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Format is an envelope format: the shape an [Event] takes on the wire.
// Decoding accepts both formats, whichever one is configured for encoding.
type Format string

const (
	// FormatWarren is warren's envelope and the default (the zero Format):
	// the event fields ("workspace_id", "project_id", "initiator_id" and
	// "initiator_type" only when not empty), "created_at" as an RFC 3339
	// string with nanoseconds, and "version" when the event has one. It is
	// what [Event.MarshalJSON] writes.
	FormatWarren Format = "warren"

	// FormatPlane is Plane's envelope, for Plane's consumers: every field
	// Plane's outbox poller publishes, with the same JSON types. The event
	// fields (an empty project_id or initiator_id as null, as Plane's
	// nullable columns give them), then "timestamp" as integer Unix
	// seconds, "version", "publisher", "publisher_instance", "source" and
	// "outbox_id" (the outbox row id, a number; null for an event that did
	// not come from an outbox). It is not Plane's bytes, which Plane's
	// consumers (json.loads) cannot tell: the JSON is compact and the
	// event fields come first; "timestamp" is the event's creation, where
	// Plane writes the time of publishing, so a message republished later
	// keeps its event's time; and a NULL initiator_id is null, where
	// Plane writes the string "None" (Python's str(None)). docs/plane.md
	// lists these.
	FormatPlane Format = "plane"
)

// PlaneEnvelopeVersion is the "version" Plane's publisher writes, used in
// [FormatPlane] when neither the event nor the [PublisherInfo] names one.
const PlaneEnvelopeVersion = "1.0"

// PublisherInfo describes who publishes, for the fields [FormatPlane]
// carries beside the event; it publishes nothing itself. [FormatWarren]
// does not write them.
type PublisherInfo struct {
	Name     string // "publisher": the publishing service
	Instance string // "publisher_instance": which process of it, e.g. the host name
	Version  string // "version" when the event has none; default PlaneEnvelopeVersion
	Source   string // "source": the component that produced the message
}

// Encoder writes events in one envelope format. The zero Encoder writes
// [FormatWarren].
type Encoder struct {
	Format    Format
	Publisher PublisherInfo // used by FormatPlane only
}

// ParseFormat returns the Format named s: "warren" (or "", the default) or
// "plane".
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "", FormatWarren:
		return FormatWarren, nil
	case FormatPlane:
		return f, nil
	}
	return "", fmt.Errorf("unknown envelope format %q: want %q or %q", s, FormatWarren, FormatPlane)
}

// Encode returns ev as a JSON body in the encoder's format. outboxID is the
// id of the outbox row the event was read from, 0 if none; only
// [FormatPlane] writes it. An event without a creation time gets the
// current time as its Plane "timestamp", which Plane's consumers require.
// The body is compact JSON. Fields in ev.Extra follow the known ones, which win over an Extra entry
// of the same name.
func (enc Encoder) Encode(ev Event, outboxID int64) ([]byte, error) {
	f, err := ParseFormat(string(enc.Format))
	if err != nil {
		return nil, err
	}
	planeFormat := f == FormatPlane
	// One allocation for the whole body: the fields, the payload, and room
	// for the keys, quotes and Plane's publisher fields.
	w := objectWriter{compact: true, buf: make([]byte, 0, 384+len(ev.ID)+len(ev.Type)+len(ev.EntityType)+len(ev.EntityID)+
		len(ev.WorkspaceID)+len(ev.ProjectID)+len(ev.InitiatorID)+len(ev.InitiatorType)+len(ev.Version)+
		len(ev.Payload.Data)+len(ev.Payload.PreviousAttributes))}
	w.str("event_id", ev.ID, false)
	w.str("event_type", ev.Type, false)
	w.str("entity_type", ev.EntityType, false)
	w.str("entity_id", ev.EntityID, false)
	// Plane's consumers want every field; warren's envelope leaves out
	// the empty ones that only some services have (a workspace, who
	// initiated the change), so that they are not forced on others'
	// messages. Decoding gives a missing one as "".
	w.str("workspace_id", ev.WorkspaceID, !planeFormat)
	w.nullable("project_id", ev.ProjectID, planeFormat)
	w.nullable("initiator_id", ev.InitiatorID, planeFormat)
	w.str("initiator_type", ev.InitiatorType, !planeFormat)
	w.key("payload")
	if err := w.payload(ev.Payload); err != nil {
		return nil, err
	}
	if !planeFormat {
		if !ev.CreatedAt.IsZero() {
			w.key("created_at")
			// RFC 3339 is plain ASCII, which JSON quotes as it is.
			w.buf = append(ev.CreatedAt.UTC().AppendFormat(append(w.buf, '"'), time.RFC3339Nano), '"')
		} else {
			w.omit("created_at")
		}
		w.str("version", ev.Version, true)
		return finish(&w, ev.Extra)
	}
	created := ev.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	w.key("timestamp")
	w.buf = strconv.AppendInt(w.buf, created.Unix(), 10)
	p := enc.Publisher
	w.str("version", cmp.Or(ev.Version, p.Version, PlaneEnvelopeVersion), false)
	w.str("publisher", p.Name, false)
	w.str("publisher_instance", p.Instance, false)
	w.str("source", p.Source, false)
	w.key("outbox_id")
	if outboxID != 0 {
		w.buf = strconv.AppendInt(w.buf, outboxID, 10)
	} else {
		w.buf = append(w.buf, "null"...)
	}
	return finish(&w, ev.Extra)
}

func finish(w *objectWriter, extra map[string]json.RawMessage) ([]byte, error) {
	if err := w.finish(extra); err != nil {
		return nil, err
	}
	return w.buf, nil
}
