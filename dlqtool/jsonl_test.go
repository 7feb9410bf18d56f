package dlqtool

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
)

func TestHeaderCodecRoundTrip(t *testing.T) {
	t.Parallel()
	in := amqp.Table{
		"i8": int8(-128), "u8": uint8(255), "i16": int16(math.MinInt16), "u16": uint16(math.MaxUint16),
		"i32": int32(math.MinInt32), "u32": uint32(math.MaxUint32), "i64": int64(math.MaxInt64),
		"f32": float32(0.1), "f64": 0.1, "nan": math.NaN(), "inf": math.Inf(1), "-inf": float32(math.Inf(-1)),
		"dec": amqp.Decimal{Scale: 3, Value: -5}, "s": "héllo\n\"quoted\" <tag>", "bad": "\xc3\x28",
		"ts": time.Unix(1700000000, 0), "b": []byte{}, "nil": nil, "t": true, "f": false,
		"a": []any{nil, "x", []any{int8(1)}, amqp.Table{}}, "tbl": amqp.Table{"x-death": []any{amqp.Table{"count": int64(2)}}},
	}
	enc, err := encodeTable(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(enc); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	out, err := decodeTable(fields, 0)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range in {
		got := out[k]
		if f, ok := want.(float64); ok && math.IsNaN(f) {
			if g, ok := got.(float64); !ok || !math.IsNaN(g) {
				t.Errorf("%s: got %#v, want NaN", k, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %T %#v, want %T %#v", k, got, got, want, want)
		}
	}
	if len(out) != len(in) {
		t.Errorf("decoded %d headers, want %d", len(out), len(in))
	}
	// Readable where JSON allows it.
	for _, s := range []string{`"s":"héllo\n\"quoted\" <tag>"`, `"t":true`, `"nil":null`, `"i32":{"type":"int32","value":-2147483648}`} {
		if !strings.Contains(string(raw), s) {
			t.Errorf("encoding lacks %s: %s", s, raw)
		}
	}
}

func TestHeaderCodecRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"type":"int8","value":128}`,
		`{"type":"uint8","value":-1}`,
		`{"type":"int32","value":1.5}`,
		`{"type":"int64","value":"1"}`,
		`{"type":"uint32","value":4294967296}`,
		`{"type":"float32","value":"nan"}`,
		`{"type":"float32","value":1e39}`,
		`{"type":"decimal","value":1}`,
		`{"type":"timestamp","value":"yesterday"}`,
		`{"type":"bytes","value":"!!"}`,
		`{"type":"table","value":[1]}`,
		`{"type":"table","value":null}`,
		`{"type":"array","value":{}}`,
		`{"type":"string","encoding":"rot13","value":"x"}`,
		`{"type":"int8","value":1,"scale":2}`,
		`{"type":"int8","encoding":"base64","value":1}`,
		`{"type":"whatever","value":1}`,
		`{"value":1}`,
		`{"type":"int8"}`,
		`{"type":"int8","value":1,"extra":1}`,
		`{"k":"v"}`,
		strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100),
	} {
		if v, err := decodeValue(json.RawMessage(in), 0); err == nil {
			t.Errorf("%s decoded as %#v", in, v)
		}
	}
	// Bare numbers, for hand-written files.
	for in, want := range map[string]any{`42`: int64(42), `-1.5`: -1.5, `1e3`: 1000.0} {
		if v, err := decodeValue(json.RawMessage(in), 0); err != nil || v != want {
			t.Errorf("%s decoded as %#v, %v; want %#v", in, v, err, want)
		}
	}
	if _, err := encodeValue(struct{}{}, 0); err == nil {
		t.Error("an unsupported Go type encoded")
	}
}

func TestMessageJSON(t *testing.T) {
	t.Parallel()
	m := newMessage(4, amqp.Publishing{
		MessageId: "\xff-id", Type: "workitem.updated", Timestamp: time.Unix(1700000000, 0), DeliveryMode: 2,
		Headers: amqp.Table{dlq.HeaderErrorClass: "permanent", dlq.HeaderAttempts: int32(3)}, Body: []byte("\x00\xff"),
	})
	line, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(line), "\n") {
		t.Fatalf("a message spans lines: %s", line)
	}
	for _, s := range []string{`"position":4`, `"class":"permanent"`, `"attempts":3`, `"body_encoding":"base64"`, `"message_id":{"type":"string","encoding":"base64","value":"/y1pZA=="}`} {
		if !strings.Contains(string(line), s) {
			t.Errorf("line lacks %s: %s", s, line)
		}
	}
	var back Message
	if err := back.UnmarshalJSON(line); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", back, m)
	}

	for _, bad := range []string{
		`{}`,
		`{"body":"x","body_encoding":"hex"}`,
		`{"body":"!","body_encoding":"base64"}`,
		`{"body":"x","propertes":{}}`,
		`{"body":"x","properties":{"delivery_mode":300}}`,
		`{"body":"x","properties":{"message_id":5}}`,
		`{"body":"x","headers":{"a":{"type":"int8","value":1000}}}`,
		`{"body":"x"} {"body":"y"}`,
	} {
		if err := new(Message).UnmarshalJSON([]byte(bad)); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}

func TestReadMessagesNamesTheLine(t *testing.T) {
	t.Parallel()
	in := `{"body":"a"}` + "\n\n" + `{"body":"b","headers":{"x":{"type":"int8","value":1}}}` + "\n" + `not json` + "\n"
	_, err := ReadMessages(strings.NewReader(in))
	if !errors.Is(err, ErrBadExport) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("got %v, want ErrBadExport naming line 4", err)
	}
	msgs, err := ReadMessages(strings.NewReader(`{"body":"a"}` + "\n" + `{"body":"b"}`)) // no final newline
	if err != nil || len(msgs) != 2 || string(msgs[1].Body) != "b" {
		t.Fatalf("got %d messages, %v", len(msgs), err)
	}
}

func TestFilter(t *testing.T) {
	t.Parallel()
	now := time.Now()
	msg := func(typ string, class dlq.Class, errText string, died time.Time, id string) *Message {
		m := newMessage(0, amqp.Publishing{MessageId: id, Type: typ, Headers: dlq.Stamp(nil, dlq.Failure{Err: errText, At: died}, 1, class)})
		return &m
	}
	old := msg("workitem.updated", dlq.ClassPermanent, "HTTP 500 from hook", now.Add(-3*time.Hour), "a")
	fresh := msg("cycle.created", dlq.ClassExhausted, "timeout", now.Add(-time.Minute), "b")
	fresh.Body = []byte(`{"event_id":"body-b"}`) // a message_id that is not the event's id
	noAge := newMessage(0, amqp.Publishing{MessageId: "c", Type: "workitem.created"})

	cases := []struct {
		name   string
		f      Filter
		old    bool
		fresh  bool
		noAge_ bool
	}{
		{"zero", Filter{}, true, true, true},
		{"type prefix", Filter{TypePrefixes: []string{"workitem."}}, true, false, true},
		{"any of two prefixes", Filter{TypePrefixes: []string{"cycle.", "workitem.up"}}, true, true, false},
		{"class", Filter{Classes: []dlq.Class{dlq.ClassExhausted}}, false, true, false},
		{"error text", Filter{ErrorContains: "HTTP 5"}, true, false, false},
		{"older than", Filter{OlderThan: time.Hour}, true, false, false},
		{"newer than", Filter{NewerThan: time.Hour}, false, true, false},
		{"age window", Filter{OlderThan: time.Hour, NewerThan: 4 * time.Hour}, true, false, false},
		{"event id", Filter{EventIDs: []string{"b", "c"}}, false, true, true},
		{"body event id", Filter{EventIDs: []string{"body-b"}}, false, true, false},
		{"signature", Filter{Signatures: []string{dlq.Signature(dlq.ClassPermanent, "HTTP 500 from hook")}}, true, false, false},
		{"any of two signatures", Filter{Signatures: []string{dlq.Signature(dlq.ClassExhausted, "timeout"), "permanent: HTTP 503 from hook"}}, false, true, false},
		{"all criteria", Filter{TypePrefixes: []string{"workitem."}, Classes: []dlq.Class{dlq.ClassPermanent}, ErrorContains: "500", OlderThan: time.Hour, EventIDs: []string{"a"}}, true, false, false},
	}
	for _, c := range cases {
		if err := c.f.Validate(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if got := [3]bool{c.f.Match(old, now), c.f.Match(fresh, now), c.f.Match(&noAge, now)}; got != [3]bool{c.old, c.fresh, c.noAge_} {
			t.Errorf("%s: matches (old, fresh, no age) = %v, want %v", c.name, got, [3]bool{c.old, c.fresh, c.noAge_})
		}
	}
	for _, bad := range []Filter{
		{Classes: []dlq.Class{"nope"}},
		{Classes: []dlq.Class{"Permanent"}},
		{OlderThan: -time.Second},
		{OlderThan: 2 * time.Hour, NewerThan: time.Hour},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrBadFilter) {
			t.Errorf("%+v: Validate = %v", bad, err)
		}
	}
	if c, err := ParseClass(" Expired "); err != nil || c != dlq.ClassExpired {
		t.Errorf("ParseClass: %q, %v", c, err)
	}
}

func TestReplayPublishing(t *testing.T) {
	t.Parallel()
	died := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	headers := dlq.Stamp(amqp.Table{"keep": "me", dlq.HeaderReplays: int32(2)}, dlq.Failure{
		Err: "boom", At: died, Queue: "webhook", Exchange: "events", RoutingKey: "rk", Consumer: "webhook", Host: "h",
	}, 5, dlq.ClassExhausted)
	headers["x-death"] = []any{amqp.Table{"queue": "webhook", "reason": "expired"}}
	headers["x-first-death-queue"] = "webhook"
	headers["x-last-death-reason"] = "expired"
	m := newMessage(0, amqp.Publishing{MessageId: "id", Headers: headers, Body: []byte("b")})

	p := replayPublishing(&m, "webhook", 0)
	for _, gone := range []string{dlq.HeaderError, dlq.HeaderErrorClass, dlq.HeaderAttempts, dlq.HeaderFirstFailure, dlq.HeaderLastFailure, "x-death", "x-first-death-queue", "x-last-death-reason"} {
		if _, ok := p.Headers[gone]; ok {
			t.Errorf("replayed message keeps %s", gone)
		}
	}
	// The broker's death in the origin queue is kept as warren's first death.
	want := amqp.Table{"keep": "me", dlq.HeaderReplays: int32(3), dlq.HeaderOriginQueue: "webhook", dlq.HeaderOriginExchange: "events",
		dlq.HeaderOriginRoutingKey: "rk", dlq.HeaderConsumer: "webhook", dlq.HeaderHost: "h",
		dlq.HeaderFirstDeathReason: "expired", dlq.HeaderFirstDeathQueue: "webhook"}
	if !reflect.DeepEqual(p.Headers, want) {
		t.Errorf("replay headers\n got %v\nwant %v", p.Headers, want)
	}
	if _, ok := m.Headers[dlq.HeaderError]; !ok {
		t.Error("replayPublishing changed the original's headers")
	}

	// An expired message's origin comes from x-death and is written down.
	expired := newMessage(0, amqp.Publishing{Headers: amqp.Table{"x-death": []any{amqp.Table{
		"queue": "webhook", "reason": "expired", "exchange": "events", "routing-keys": []any{"k"}, "count": int64(1),
	}}}})
	p = replayPublishing(&expired, "webhook", 0)
	want = amqp.Table{dlq.HeaderReplays: int32(1), dlq.HeaderOriginQueue: "webhook", dlq.HeaderOriginExchange: "events", dlq.HeaderOriginRoutingKey: "k",
		dlq.HeaderFirstDeathReason: "expired", dlq.HeaderFirstDeathQueue: "webhook"}
	if !reflect.DeepEqual(p.Headers, want) {
		t.Errorf("expired replay headers\n got %v\nwant %v", p.Headers, want)
	}

	// Headers naming another origin queue do not survive the replay: the
	// copy records the queue it was replayed home to.
	foreign := newMessage(0, amqp.Publishing{Headers: amqp.Table{dlq.HeaderOriginQueue: "billing", "x-death": []any{amqp.Table{
		"queue": "billing", "reason": "expired", "count": int64(1),
	}}}})
	p = replayPublishing(&foreign, "webhook", 0)
	want = amqp.Table{dlq.HeaderReplays: int32(1), dlq.HeaderOriginQueue: "webhook"}
	if !reflect.DeepEqual(p.Headers, want) {
		t.Errorf("foreign replay headers\n got %v\nwant %v", p.Headers, want)
	}
}

func TestPacer(t *testing.T) {
	t.Parallel()
	p := pacer{rate: 200}
	start := time.Now()
	for range 21 {
		if err := p.wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// 21 calls at 200/s span at least 20 intervals of 5ms.
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("21 paced calls at 200/s took %v", el)
	}
}

// The checking pass counts a text body's length without unquoting it; the
// count is the length encoding/json gives the text, whatever the string
// holds: escapes, surrogate pairs, lone surrogates, bytes that are not
// UTF-8.
func FuzzUnquotedLen(f *testing.F) {
	for _, s := range []string{``, `plain`, `{\"event_id\":\"x\"}`, `\n\t\\\/\b\f\r`, `\u00e9\u20ac`, `\ud83d\ude00`, `\ud83d`, `\ude00\ud83d x`,
		`\ud83d\u0041`, "caf\xc3\xa9", "\xff\xfe bad", "\xe2\x82", `\uD83D\uDE00`} {
		f.Add([]byte(`"` + s + `"`))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var text unquotedText
		if len(raw) < 2 || raw[0] != '"' || json.Unmarshal(raw, &text) != nil {
			return // only valid JSON strings reach it
		}
		if got := unquotedLen(raw); got != len(text) {
			t.Errorf("unquotedLen(%q) = %d, encoding/json unquotes %d bytes", raw, got, len(text))
		}
	})
}

// An import's read buffer is its file's longest line, not the bound: the
// Go runtime may zero a large allocation whole, so a buffer of the bound
// could be resident at its full size (a 64 MiB bound for a 40 MB line
// once made an import's peak RSS 26 MB higher, depending on when the
// collector had last run).
func TestExportReaderForSizesItsBufferToTheLongestLine(t *testing.T) {
	t.Parallel()
	line := func(n int) string { // a line of n bytes, its newline not counted
		return `{"body":"` + strings.Repeat("a", n-len(`{"body":""}`)) + `"}`
	}
	read := func(r *exportReader) (n int, err error) {
		for {
			if _, err := r.next(true); errors.Is(err, io.EOF) {
				return n, nil
			} else if err != nil {
				return n, err
			}
			n++
		}
	}
	for _, c := range []struct {
		name    string
		file    string
		max     int
		buffer  int // 0: the error below
		wantErr error
	}{
		{"short lines", line(40) + "\n" + line(100) + "\n" + line(50) + "\n", 1000, 101 + 1, nil},
		{"the last line without a newline, the longest", line(40) + "\n" + line(100), 1000, 100 + 1, nil},
		{"a line of exactly the bound", line(40) + "\n" + line(1000) + "\n", 1000, 1000 + 1, nil},
		{"the last line of exactly the bound, without a newline", line(1000), 1000, 1000 + 1, nil},
		{"a line one byte over the bound", line(40) + "\n" + line(1001) + "\n", 1000, 1000 + 1, ErrLineTooLong},
		{"an empty file", "", 1000, 16, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.NewReader(c.file)
			r, err := newExportReaderFor(src, c.max)
			if err != nil {
				t.Fatal(err)
			}
			if got := max(r.br.Size(), 16); got != c.buffer {
				t.Errorf("buffer of %d bytes, want %d", got, c.buffer)
			}
			lines := strings.Count(c.file, "\n") + 1
			if c.file == "" || strings.HasSuffix(c.file, "\n") {
				lines--
			}
			n, err := read(r)
			if !errors.Is(err, c.wantErr) || (err == nil && n != lines) {
				t.Errorf("read %d messages, error %v; want %d, error %v", n, err, lines, c.wantErr)
			}
		})
	}

	// The second pass of an import finds a line longer than the first did.
	src := strings.NewReader(line(40) + "\n" + line(100) + "\n")
	r, err := newExportReaderFor(src, 1000)
	if err != nil {
		t.Fatal(err)
	}
	r.rewind(strings.NewReader(line(40) + "\n" + line(300) + "\n"))
	if _, err := read(r); err == nil || !strings.Contains(err.Error(), "the file changed") || errors.Is(err, ErrLineTooLong) {
		t.Errorf("a line that grew between the passes: %v; want the file changed, not a line over the bound", err)
	}
}

// stuckReader returns nothing, and no error, for ever.
type stuckReader struct{}

func (stuckReader) Read([]byte) (int, error) { return 0, nil }

// A reader that makes no progress ends the search for the longest line
// with io.ErrNoProgress, as bufio ends a read, instead of holding the
// import for ever.
func TestLongestLineRefusesAReaderThatMakesNoProgress(t *testing.T) {
	t.Parallel()
	if _, err := longestLine(stuckReader{}, 100); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("longestLine of a stuck reader: %v, want io.ErrNoProgress", err)
	}
}
