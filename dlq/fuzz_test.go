package dlq_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
)

// FuzzParseMetadata feeds ParseMetadata hostile headers: any table the
// export format can describe (every AMQP type, nested), in place of or next
// to warren's headers. ParseMetadata must not panic, must report each
// header of the wrong type (and nothing else) as a problem, and a Stamp
// over such headers must still read back as what was stamped.
func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(`{}`), "boom", "permanent", 3, int64(1700000000), "webhook")
	f.Add([]byte(`{"x-warren-attempts":{"type":"uint8","value":200},"x-warren-error":{"type":"bytes","value":"AAE="}}`), "", "", 0, int64(0), "")
	f.Fuzz(func(t *testing.T, headersJSON []byte, errText, class string, attempts int, unixSec int64, queue string) {
		var fields map[string]json.RawMessage
		if json.Unmarshal(headersJSON, &fields) != nil {
			return
		}
		// The export format's decoder builds the table: it is the one way
		// in to warren for arbitrary AMQP values, nested.
		line, err := json.Marshal(map[string]any{"headers": fields, "body": ""})
		if err != nil {
			return
		}
		var msg dlqtool.Message
		if msg.UnmarshalJSON(line) != nil {
			return
		}
		h := msg.Headers
		m := dlq.ParseMetadata(h)

		for _, p := range m.Problems {
			name, _, _ := strings.Cut(strings.TrimPrefix(p, "header "), ":")
			name, _, _ = strings.Cut(name, "[")
			if _, ok := h[name]; !ok {
				t.Fatalf("problem %q names a header that is not there", p)
			}
		}
		for _, name := range []string{dlq.HeaderError, dlq.HeaderErrorClass, dlq.HeaderOriginQueue, dlq.HeaderOriginExchange, dlq.HeaderOriginRoutingKey, dlq.HeaderConsumer, dlq.HeaderHost} {
			v, present := h[name]
			_, isString := v.(string)
			_, isBytes := v.([]byte)
			reported := slices.ContainsFunc(m.Problems, func(p string) bool { return strings.HasPrefix(p, "header "+name+":") })
			if want := present && v != nil && !isString && !isBytes; reported != want {
				t.Fatalf("header %s = %#v: reported %v, want %v (problems %v)", name, v, reported, want, m.Problems)
			}
		}
		if c, ok := h[dlq.HeaderErrorClass].(string); ok && c != "" && m.Class != dlq.Class(c) {
			t.Fatalf("class header %q read as %q", c, m.Class)
		}

		// Stamp over whatever was there. Times are kept within the years
		// RFC 3339 can write (0000-9999).
		at := time.Unix(unixSec%253402300800, 0).UTC()
		if at.Year() < 0 {
			at = at.AddDate(1970, 0, 0)
		}
		fl := dlq.Failure{Err: errText, At: at, Queue: queue, Consumer: "c", Host: "h"}
		sm := dlq.ParseMetadata(dlq.Stamp(h, fl, attempts, dlq.Class(class)))
		wantAttempts := int(int32(max(0, min(attempts, math.MaxInt32))))
		wantLast := at
		if class == "" && len(sm.Deaths) > 0 && sm.Deaths[0].Time.After(at) && sm.Class != "" {
			wantLast = sm.Deaths[0].Time // the broker's death came later than the stamp
		}
		if sm.Attempts != wantAttempts || !sm.LastFailure.Equal(wantLast) || sm.Consumer != "c" || sm.Host != "h" {
			t.Fatalf("Stamp then dlq.ParseMetadata: %+v\nfrom %+v, %d attempts", sm, fl, attempts)
		}
		// Without a class, an x-death saying "expired" classifies the
		// message and may supply its error text and origin; with one, the
		// stamp is the whole story.
		if class != "" && (sm.Class != dlq.Class(class) || sm.OriginQueue != queue || sm.Error != dlq.Truncate(errText, dlq.MaxErrorLen)) {
			t.Fatalf("stamped class %q, queue %q, error %q read as %q, %q, %q", class, queue, errText, sm.Class, sm.OriginQueue, sm.Error)
		}
		// Stripping hostile headers leaves none of the broker's, and records
		// only a death the broker could have written.
		stripped := dlq.StripDeaths(h, queue)
		for _, name := range dlq.BrokerDeathHeaders {
			if _, ok := stripped[name]; ok {
				t.Fatalf("StripDeaths left %s", name)
			}
		}
		if r, ok := stripped[dlq.HeaderFirstDeathReason].(string); ok && h[dlq.HeaderFirstDeathReason] == nil {
			if _, known := dlq.BrokerClasses[r]; !known || stripped[dlq.HeaderFirstDeathQueue] != queue {
				t.Fatalf("StripDeaths recorded %q from %v", r, stripped[dlq.HeaderFirstDeathQueue])
			}
		}
		for _, p := range sm.Problems {
			for _, written := range []string{dlq.HeaderError, dlq.HeaderErrorClass, dlq.HeaderAttempts, dlq.HeaderLastFailure, dlq.HeaderOriginQueue, dlq.HeaderConsumer, dlq.HeaderHost} {
				if strings.HasPrefix(p, "header "+written+":") {
					t.Fatalf("a header dlq.Stamp wrote reads back as a problem: %s", p)
				}
			}
		}
	})
}
