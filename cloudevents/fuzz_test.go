package cloudevents_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
)

// fuzzHeaders turns the fuzzer's text into headers: lines of name=value,
// the value typed by its first byte (i int32, b bool, t/f, x bytes, n
// void, anything else a string).
func fuzzHeaders(text string) amqp.Table {
	h := amqp.Table{}
	for _, line := range strings.Split(text, "\n") {
		name, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(v, "i"):
			var n int32
			for _, c := range v[1:] {
				n = n*10 + int32(c%10)
			}
			h[name] = n
		case v == "t" || v == "f":
			h[name] = v == "t"
		case strings.HasPrefix(v, "x"):
			h[name] = []byte(v[1:])
		case v == "n":
			h[name] = nil
		default:
			h[name] = v
		}
	}
	return h
}

// FuzzDecode feeds Decode arbitrary messages. It must never panic, every
// error must be undecodable, and an event it accepts must be one that
// warren's own envelope carries as it is (so a consumer can forward it,
// and a handler sees what a warren producer could have sent), and that
// Encode writes and Decode reads back unchanged.
func FuzzDecode(f *testing.F) {
	f.Add("application/json", "cloudEvents:specversion=1.0\ncloudEvents:id=e\ncloudEvents:source=/s\ncloudEvents:type=ty\ncloudEvents:n=i5", payload)
	f.Add("", "cloudEvents_specversion=1.0\ncloudEvents_id=e\ncloudEvents_source=/s\ncloudEvents_type=ty\ncloudEvents_timestamp=1714557600", `{"data":"{}"}`)
	f.Add("application/json", "cloudEvents:specversion=1.0\ncloudEvents:id=e\ncloudEvents:source=/s\ncloudEvents:type=ty\ncloudEvents:warrenextra={\"a\": [1, 2]}", `null`)
	f.Add("application/json", "cloudEvents:specversion=1.0\ncloudEvents:id=e\ncloudEvents:source=/s\ncloudEvents:type=ty\ncloudEvents:payload=x", ``)
	f.Add(cloudevents.StructuredContentType, "", structured(`"time":"2016-12-31T23:59:60Z","ext":-0,"dataschema":"urn:x"`))
	f.Add(cloudevents.StructuredContentType, "cloudEvents:id=ev-1", structured(`"warrenextra":"{\"x\":{\"y\": null}}"`))
	f.Add(cloudevents.StructuredContentType, "", `{"specversion":"1.0","id":"e","source":"/s","type":"t","data_base64":"e30="}`)
	enc := cloudevents.Encoder{Source: "/s", Mode: cloudevents.Structured}
	for _, seed := range []uint64{1, 2, 3} {
		_ = seed
		m, err := enc.Encode(warren.Event{ID: "e", Type: "t", Extra: map[string]json.RawMessage{"outbox_id": json.RawMessage(`7`), "publisher": json.RawMessage(`"p"`)}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.ContentType, "", string(m.Body))
	}
	f.Fuzz(func(t *testing.T, ct, hdr, body string) {
		got, err := cloudevents.Decode(ct, fuzzHeaders(hdr), []byte(body))
		if err != nil {
			undecodable(t, err)
			return
		}
		want, ok := reference(t, got.Event)
		if !ok {
			b, err := warren.Encoder{}.Encode(got.Event, 0)
			_, derr := warren.DecodeEvent(b)
			t.Fatalf("Decode accepted an event warren's envelope cannot carry (%v, %v): %#v", err, derr, got.Event)
		}
		if !sameEvent(got.Event, want) {
			t.Fatalf("warren's envelope changes the decoded event:\ndecoded %#v\nthrough %#v", got.Event, want)
		}
		source := got.Source
		if strings.ContainsAny(source, " \"<>\\^`{|}%") || !isASCII(source) {
			source = "/s" // Decode takes any String as the source; Encode wants a URI-reference
		}
		for _, mode := range []cloudevents.Mode{cloudevents.Binary, cloudevents.Structured} {
			m, err := cloudevents.Encoder{Source: source, Mode: mode}.Encode(got.Event)
			if err != nil {
				t.Fatalf("%v: Encode of a decoded event: %v\n%#v", mode, err, got.Event)
			}
			again, err := cloudevents.Decode(m.ContentType, m.Headers, m.Body)
			if err != nil {
				t.Fatalf("%v: Decode of what Encode wrote: %v\nheaders %v\nbody %s", mode, err, m.Headers, m.Body)
			}
			if !sameEvent(again.Event, got.Event) {
				t.Fatalf("%v: a second round trip changed the event:\nfirst  %#v\nsecond %#v", mode, got.Event, again.Event)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// sameEvent compares events as JSON compares them: raw parts equal once
// compacted, an absent payload part and null alike (warren's encoder
// writes null for one), times equal as instants.
func sameEvent(a, b warren.Event) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return false
	}
	a.CreatedAt = b.CreatedAt
	compactAll := func(ev *warren.Event) {
		ev.Payload.Data, ev.Payload.PreviousAttributes = compact(ev.Payload.Data), compact(ev.Payload.PreviousAttributes)
		for _, m := range []*map[string]json.RawMessage{&ev.Extra, &ev.Payload.Extra} {
			if len(*m) == 0 {
				*m = nil
				continue
			}
			c := map[string]json.RawMessage{}
			for k, v := range *m {
				c[k] = compact(v)
			}
			*m = c
		}
	}
	compactAll(&a)
	compactAll(&b)
	return reflect.DeepEqual(a, b)
}

func compact(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return json.RawMessage("null")
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}
