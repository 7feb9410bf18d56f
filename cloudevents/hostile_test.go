package cloudevents_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
)

// del, as a header's value in headers, removes it.
type deleted struct{}

var del deleted

// headers returns a binary-mode event's headers with changes: name, value
// pairs; a value del removes the header.
func headers(changes ...any) amqp.Table {
	h := amqp.Table{
		"cloudEvents:specversion": "1.0", "cloudEvents:id": "ev-1", "cloudEvents:source": "/issues",
		"cloudEvents:type": "workitem.updated", "cloudEvents:subject": "i-1",
	}
	for i := 0; i < len(changes); i += 2 {
		if changes[i+1] == del {
			delete(h, changes[i].(string))
			continue
		}
		h[changes[i].(string)] = changes[i+1]
	}
	return h
}

// structured returns a structured body: the members of a valid event,
// then extra, which may repeat or override one of them by coming later.
func structured(extra string) string {
	b := `{"specversion":"1.0","id":"ev-1","source":"/issues","type":"workitem.updated","subject":"i-1"`
	if extra != "" {
		b += "," + extra
	}
	return b + `,"data":{"data":{"id":"i-1"},"previous_attributes":null}}`
}

const payload = `{"data":{"id":"i-1"},"previous_attributes":null}`

// Every malformed or hostile message gives a clear error that the consumer
// dead-letters as undecodable, and every unusual but legal one a defined
// result; none panics.
func TestDecodeHostile(t *testing.T) {
	megabyte := strings.Repeat("x", 1<<20)
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	cases := []struct {
		name    string
		ct      string
		headers amqp.Table
		body    string
		wantErr string                         // a part of the error; "" for success
		check   func(cloudevents.Event) string // for success: what is wrong, or ""
	}{
		// Binary mode: header types and sizes.
		{name: "id a number", ct: "application/json", headers: headers("cloudEvents:id", int32(42)), body: payload,
			wantErr: "id is an Integer, not a String"},
		{name: "id an int64", ct: "application/json", headers: headers("cloudEvents:id", int64(42)), body: payload,
			wantErr: "id is an Integer, not a String"},
		{name: "id a table", ct: "application/json", headers: headers("cloudEvents:id", amqp.Table{"a": "b"}), body: payload,
			wantErr: "header cloudEvents:id: a table is not a CloudEvents type"},
		{name: "id an array", ct: "application/json", headers: headers("cloudEvents:id", []any{"ev-1"}), body: payload,
			wantErr: "an array is not a CloudEvents type"},
		{name: "id a float", ct: "application/json", headers: headers("cloudEvents:id", 1.5), body: payload,
			wantErr: "a floating-point number is not a CloudEvents type"},
		{name: "id a decimal", ct: "application/json", headers: headers("cloudEvents:id", amqp.Decimal{Scale: 1, Value: 5}), body: payload,
			wantErr: "a decimal is not a CloudEvents type"},
		{name: "id bytes", ct: "application/json", headers: headers("cloudEvents:id", []byte("ev-1")), body: payload,
			wantErr: "id is Binary, not a String"},
		{name: "id a megabyte", ct: "application/json", headers: headers("cloudEvents:id", megabyte), body: payload,
			wantErr: "header cloudEvents:id: it is 1048576 bytes, more than the 8192"},
		{name: "id 300 bytes", ct: "application/json", headers: headers("cloudEvents:id", strings.Repeat("x", 300)), body: payload,
			wantErr: "event_id is 300 bytes"},
		{name: "an extension a megabyte", ct: "application/json", headers: headers("cloudEvents:tenant", megabyte), body: payload,
			wantErr: "header cloudEvents:tenant: it is 1048576 bytes"},
		{name: "id empty", ct: "application/json", headers: headers("cloudEvents:id", ""), body: payload,
			wantErr: "the required attribute id is empty"},
		{name: "id void", ct: "application/json", headers: headers("cloudEvents:id", nil), body: payload,
			wantErr: "the required attribute id is missing"},
		{name: "id with a newline", ct: "application/json", headers: headers("cloudEvents:id", "ev\n1"), body: payload,
			wantErr: "id: it holds a control character (U+000A"},
		{name: "id with leading space", ct: "application/json", headers: headers("cloudEvents:id", " ev-1"), body: payload,
			wantErr: "event_id starts or ends with white space"},
		{name: "id not UTF-8", ct: "application/json", headers: headers("cloudEvents:id", "ev\xff"), body: payload,
			wantErr: "id: it is not valid UTF-8"},
		{name: "entitytype a number", ct: "application/json", headers: headers("cloudEvents:entitytype", int32(3)), body: payload,
			wantErr: "entitytype is an Integer, not a String"},
		{name: "entitytype with NUL", ct: "application/json", headers: headers("cloudEvents:entitytype", "is\x00sue"), body: payload,
			wantErr: "entitytype: it holds a control character (U+0000"},
		{name: "no specversion", ct: "application/json", headers: headers("cloudEvents:specversion", del), body: payload,
			wantErr: "the required attribute specversion is missing"},
		{name: "specversion 0.3", ct: "application/json", headers: headers("cloudEvents:specversion", "0.3"), body: payload,
			wantErr: `specversion "0.3": warren reads CloudEvents 1.0`},
		{name: "specversion 1.0.2", ct: "application/json", headers: headers("cloudEvents:specversion", "1.0.2"), body: payload,
			wantErr: `specversion "1.0.2"`},
		{name: "specversion a number", ct: "application/json", headers: headers("cloudEvents:specversion", int32(1)), body: payload,
			wantErr: "specversion is an Integer, not a String"},
		{name: "no source", ct: "application/json", headers: headers("cloudEvents:source", del), body: payload,
			wantErr: "the required attribute source is missing"},
		{name: "no type", ct: "application/json", headers: headers("cloudEvents:type", del), body: payload,
			wantErr: "the required attribute type is missing"},
		{name: "subject empty", ct: "application/json", headers: headers("cloudEvents:subject", ""), body: payload,
			wantErr: "subject is empty"},
		{name: "dataschema relative", ct: "application/json", headers: headers("cloudEvents:dataschema", "/schema.json"), body: payload,
			wantErr: "dataschema \"/schema.json\" is not an absolute URI"},

		// Binary mode: header names.
		{name: "underscore prefix", ct: "application/json", headers: amqp.Table{
			"cloudEvents_specversion": "1.0", "cloudEvents_id": "ev-1", "cloudEvents_source": "/s", "cloudEvents_type": "t"}, body: payload,
			check: func(e cloudevents.Event) string {
				return want(e.Event.ID == "ev-1" && e.Source == "/s" && string(e.Event.Payload.Data) == `{"id":"i-1"}`, "the event")
			}},
		{name: "prefixes mixed", ct: "application/json", headers: headers("cloudEvents_tenant", "acme"), body: payload,
			wantErr: "the headers mix the prefixes"},
		{name: "one attribute under both prefixes", ct: "application/json", headers: headers("cloudEvents_id", "ev-2"), body: payload,
			wantErr: "the headers mix the prefixes"},
		{name: "prefix miscased", ct: "application/json", headers: headers("CloudEvents:tenant", "acme"), body: payload,
			wantErr: `header "CloudEvents:tenant": the prefix is spelled`},
		{name: "prefix lower case", ct: "application/json", headers: headers("cloudevents:id", "ev-2"), body: payload,
			wantErr: "the prefix is spelled"},
		{name: "attribute name upper case", ct: "application/json", headers: headers("cloudEvents:ID", "ev-2"), body: payload,
			wantErr: `"ID" is not a legal attribute name`},
		{name: "attribute name with underscore", ct: "application/json", headers: headers("cloudEvents:entity_type", "issue"), body: payload,
			wantErr: `"entity_type" is not a legal attribute name`},
		{name: "attribute name empty", ct: "application/json", headers: headers("cloudEvents:", "x"), body: payload,
			wantErr: `"" is not a legal attribute name`},
		{name: "data as a header", ct: "application/json", headers: headers("cloudEvents:data", `{"x":1}`), body: payload,
			wantErr: "a header names data, which is no attribute"},
		{name: "datacontenttype header disagrees", ct: "application/json", headers: headers("cloudEvents:datacontenttype", "text/xml"), body: payload,
			wantErr: `the header datacontenttype "text/xml" disagrees with the content type "application/json"`},
		{name: "datacontenttype header agrees", ct: "application/json", headers: headers("cloudEvents:datacontenttype", "application/json"), body: payload,
			check: func(e cloudevents.Event) string { return want(e.Event.Extra == nil, "no Extra field") }},
		{name: "datacontenttype header, no content type", headers: headers("cloudEvents:datacontenttype", "text/plain"), body: payload,
			wantErr: `datacontenttype "text/plain" is not JSON`},
		{name: "no CloudEvents header", ct: "application/json", headers: amqp.Table{"x-warren-entity-id": "i-1"}, body: payload,
			wantErr: "not a CloudEvent"},
		{name: "other headers are not the event's", ct: "application/json", headers: headers("x-warren-entity-id", "other", "traceparent", "00-x"), body: payload,
			check: func(e cloudevents.Event) string {
				return want(e.Event.EntityID == "i-1" && e.Event.Extra == nil, "the subject, no Extra")
			}},
		{name: "a foreign extension named like warrenextra's member", ct: "application/json",
			headers: headers("cloudEvents:tenant", "a", "cloudEvents:warrenextra", `{"tenant":"b"}`), body: payload,
			wantErr: `warrenextra holds "tenant", which is also an extension attribute`},
		{name: "warrenextra smuggles event_id", ct: "application/json", headers: headers("cloudEvents:warrenextra", `{"event_id":"other"}`), body: payload,
			wantErr: `warrenextra holds "event_id", a field of warren's envelope`},
		{name: "warrenextra repeats a key", ct: "application/json", headers: headers("cloudEvents:warrenextra", `{"a":1,"a":2}`), body: payload,
			wantErr: `warrenextra holds "a" twice`},
		{name: "warrenextra not JSON", ct: "application/json", headers: headers("cloudEvents:warrenextra", `{a}`), body: payload,
			wantErr: "warrenextra is not a JSON object"},
		{name: "warrenextra an array", ct: "application/json", headers: headers("cloudEvents:warrenextra", `[1]`), body: payload,
			wantErr: "warrenextra is not a JSON object"},
		{name: "warrenextra a number", ct: "application/json", headers: headers("cloudEvents:warrenextra", int32(1)), body: payload,
			wantErr: "warrenextra is an Integer, not a String"},

		// Extensions named like warren's envelope fields.
		{name: "an extension named payload", ct: "application/json", headers: headers("cloudEvents:payload", "x"), body: payload,
			wantErr: "the extension attribute payload is named like a field of warren's envelope"},
		{name: "a timestamp extension without time: the event's time, as in warren's envelope", ct: "application/json",
			headers: headers("cloudEvents:timestamp", int32(1714557600)), body: payload,
			check: func(e cloudevents.Event) string {
				return want(e.Event.CreatedAt.Equal(time.Unix(1714557600, 0)) && string(e.Event.Extra["timestamp"]) == "1714557600", "CreatedAt and Extra timestamp")
			}},
		{name: "a timestamp extension without time, an RFC 3339 string", ct: "application/cloudevents+json",
			body:  structured(`"timestamp":"2024-05-01T10:00:00Z"`),
			check: wantTime("2024-05-01T10:00:00Z")},
		{name: "a timestamp extension without time that is no time", ct: "application/json",
			headers: headers("cloudEvents:timestamp", "yesterday"), body: payload,
			wantErr: `there is no time attribute, and the timestamp extension, which warren then reads as the event's time (Plane's), is not one: timestamp: "yesterday" is not an RFC 3339 time`},
		{name: "a timestamp extension beside time: time wins", ct: "application/json",
			headers: headers("cloudEvents:timestamp", "yesterday", "cloudEvents:time", "2024-05-01T10:00:00Z"), body: payload,
			check: wantTime("2024-05-01T10:00:00Z")},
		{name: "a structured member name too long for a header", ct: "application/cloudevents+json",
			body: structured(`"` + strings.Repeat("a", 244) + `":1`), wantErr: "is 244 bytes long, more than an AMQP header's name holds"},

		// Binary mode: extension values of every AMQP type.
		{name: "extensions of every type", ct: "application/json", headers: headers(
			"cloudEvents:b", true, "cloudEvents:i8", int8(-8), "cloudEvents:u16", uint16(16), "cloudEvents:i64", int64(-1<<31),
			"cloudEvents:u32", uint32(1<<31-1), "cloudEvents:bin", []byte{0, 1, 2}, "cloudEvents:ts", time.Unix(1714557600, 0),
			"cloudEvents:void", nil), body: payload,
			check: func(e cloudevents.Event) string {
				x := e.Event.Extra
				return want(string(x["b"]) == "true" && string(x["i8"]) == "-8" && string(x["u16"]) == "16" &&
					string(x["i64"]) == "-2147483648" && string(x["u32"]) == "2147483647" && string(x["bin"]) == `"AAEC"` &&
					string(x["ts"]) == `"2024-05-01T10:00:00Z"` && x["void"] == nil && len(x) == 7, "typed Extra fields")
			}},
		{name: "an integer past 32 bits", ct: "application/json", headers: headers("cloudEvents:n", int64(1<<31)), body: payload,
			wantErr: "header cloudEvents:n: the integer 2147483648 is outside a CloudEvents Integer's range"},
		{name: "an unsigned integer past 32 bits", ct: "application/json", headers: headers("cloudEvents:n", uint64(1<<40)), body: payload,
			wantErr: "outside a CloudEvents Integer's range"},

		// Binary mode: content type and data.
		{name: "data not JSON", ct: "application/json", headers: headers(), body: "not json",
			wantErr: "data is not valid JSON"},
		{name: "data not UTF-8", ct: "application/json", headers: headers(), body: "{\"data\":\"\xff\"}",
			wantErr: "data is not valid UTF-8"},
		{name: "data an array", ct: "application/json", headers: headers(), body: `[1,2]`,
			wantErr: "data must be a JSON object (warren's payload: data and previous_attributes), got an array"},
		{name: "data a JSON string holding an object", ct: "application/json", headers: headers(), body: `"{}"`,
			wantErr: "data must be a JSON object"},
		{name: "data a number", ct: "application/json", headers: headers(), body: `5`,
			wantErr: "data must be a JSON object"},
		{name: "data too deep", ct: "application/json", headers: headers(), body: deep,
			wantErr: "data is not valid JSON"},
		{name: "data null", ct: "application/json", headers: headers(), body: `null`,
			check: func(e cloudevents.Event) string { return want(e.Event.Payload.Data == nil, "no payload") }},
		{name: "no data", ct: "application/json", headers: headers(), body: ``,
			check: func(e cloudevents.Event) string { return want(e.Event.Payload.Data == nil, "no payload") }},
		{name: "payload keys repeated: the last wins, as in warren's envelope", ct: "application/json", headers: headers(),
			body: `{"data":{"v":1},"data":{"v":2}}`,
			check: func(e cloudevents.Event) string {
				return want(string(e.Event.Payload.Data) == `{"v":2}`, `data {"v":2}`)
			}},
		{name: "content type not JSON", ct: "text/plain", headers: headers(), body: payload,
			wantErr: `datacontenttype "text/plain" is not JSON`},
		{name: "content type JSON in latin1", ct: "application/json; charset=latin1", headers: headers(), body: payload,
			wantErr: "JSON is UTF-8, not latin1"},
		{name: "content type a +json type with charset", ct: "application/vnd.plane+json; charset=UTF-8", headers: headers(), body: payload,
			check: func(e cloudevents.Event) string { return want(e.Event.ID == "ev-1", "the event") }},
		{name: "content type garbled", ct: "application/json; ;", headers: headers(), body: payload,
			wantErr: `datacontenttype "application/json; ;"`},
		{name: "no content type: JSON assumed", headers: headers(), body: payload,
			check: func(e cloudevents.Event) string { return want(e.Event.ID == "ev-1", "the event") }},

		// Times: the binding's two forms, RFC 3339's corners.
		{name: "time an AMQP timestamp", ct: "application/json", headers: headers("cloudEvents:time", time.Unix(1714557600, 0)), body: payload,
			check: wantTime("2024-05-01T10:00:00Z")},
		{name: "time a number", ct: "application/json", headers: headers("cloudEvents:time", int64(1714557600)), body: payload,
			wantErr: "time: an Integer is not a Timestamp"},
		{name: "time lower-case t and z", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01t10:00:00.5z"), body: payload,
			check: wantTime("2024-05-01T10:00:00.5Z")},
		{name: "time with an offset", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T12:30:00+02:30"), body: payload,
			check: wantTime("2024-05-01T10:00:00Z")},
		{name: "time with an unknown local offset", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T10:00:00-00:00"), body: payload,
			check: wantTime("2024-05-01T10:00:00Z")},
		{name: "time past nanoseconds: truncated", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T10:00:00.1234567891234Z"), body: payload,
			check: wantTime("2024-05-01T10:00:00.123456789Z")},
		{name: "time a leap second", ct: "application/json", headers: headers("cloudEvents:time", "2016-12-31T23:59:60Z"), body: payload,
			check: wantTime("2016-12-31T23:59:59.999999999Z")},
		{name: "time a leap second in an offset", ct: "application/json", headers: headers("cloudEvents:time", "2017-01-01T00:59:60.5+01:00"), body: payload,
			check: wantTime("2016-12-31T23:59:59.999999999Z")},
		{name: "time second 60 off minute 59", ct: "application/json", headers: headers("cloudEvents:time", "2016-12-31T23:58:60Z"), body: payload,
			wantErr: "second 60 is a leap second, which only minute 59 has"},
		{name: "time year 0000", ct: "application/json", headers: headers("cloudEvents:time", "0000-01-01T00:00:00Z"), body: payload,
			check: wantTime("0000-01-01T00:00:00Z")},
		{name: "time with a space for T", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01 10:00:00Z"), body: payload,
			wantErr: "is not an RFC 3339 date-time"},
		{name: "time with a comma before the fraction", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T10:00:00,5Z"), body: payload,
			wantErr: "is not an RFC 3339 date-time"},
		{name: "time offset 24:00", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T10:00:00+24:00"), body: payload,
			wantErr: "is not an RFC 3339 date-time"},
		{name: "time without an offset", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T10:00:00"), body: payload,
			wantErr: "is not an RFC 3339 date-time"},
		{name: "time February 30", ct: "application/json", headers: headers("cloudEvents:time", "2024-02-30T10:00:00Z"), body: payload,
			wantErr: "day out of range"},
		{name: "time hour 24", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T24:00:00Z"), body: payload,
			wantErr: "hour out of range"},
		{name: "time a fraction without digits", ct: "application/json", headers: headers("cloudEvents:time", "2024-05-01T10:00:00.Z"), body: payload,
			wantErr: "is not an RFC 3339 date-time"},

		// Structured mode.
		{name: "structured", ct: "application/cloudevents+json", body: structured(""),
			check: func(e cloudevents.Event) string {
				return want(e.Mode == cloudevents.Structured && e.Event.ID == "ev-1" && string(e.Event.Payload.Data) == `{"id":"i-1"}`, "the event")
			}},
		{name: "structured, content type in capitals with a charset", ct: "Application/CloudEvents+JSON; charset=UTF-8", body: structured(""),
			check: func(e cloudevents.Event) string { return want(e.Event.ID == "ev-1", "the event") }},
		{name: "structured in UTF-16", ct: "application/cloudevents+json; charset=utf-16", body: structured(""),
			wantErr: "JSON is UTF-8, not utf-16"},
		{name: "structured in Avro", ct: "application/cloudevents+avro", body: structured(""),
			wantErr: "the only event format warren reads is application/cloudevents+json"},
		{name: "structured batch", ct: "application/cloudevents-batch+json", body: "[" + structured("") + "]",
			wantErr: "the batched mode is not supported"},
		{name: "structured body an array", ct: "application/cloudevents+json", body: "[" + structured("") + "]",
			wantErr: "body is not a JSON object, got an array"},
		{name: "structured body a string", ct: "application/cloudevents+json", body: `"{}"`,
			wantErr: "body is not a JSON object, got a string"},
		{name: "structured body null", ct: "application/cloudevents+json", body: `null`,
			wantErr: "body is not a JSON object, got null"},
		{name: "structured body empty", ct: "application/cloudevents+json", body: ``,
			wantErr: "body is not valid JSON"},
		{name: "structured body not JSON", ct: "application/cloudevents+json", body: `{"id":}`,
			wantErr: "body is not valid JSON"},
		{name: "structured body two objects", ct: "application/cloudevents+json", body: structured("") + "{}",
			wantErr: "body is not valid JSON"},
		{name: "structured body not UTF-8", ct: "application/cloudevents+json", body: structured(`"tenant":"a` + "\xc3\x28" + `"`),
			wantErr: "body is not valid UTF-8"},
		{name: "structured id repeated", ct: "application/cloudevents+json", body: structured(`"id":"ev-2"`),
			wantErr: `the member "id" appears twice`},
		{name: "structured data repeated", ct: "application/cloudevents+json", body: structured(`"data":{"data":{"id":"other"}}`),
			wantErr: `the member "data" appears twice`},
		{name: "structured specversion repeated with another value", ct: "application/cloudevents+json", body: structured(`"specversion":"0.3"`),
			wantErr: `the member "specversion" appears twice`},
		{name: "structured member name in capitals", ct: "application/cloudevents+json", body: structured(`"Tenant":"a"`),
			wantErr: `the member "Tenant" is not a legal attribute name`},
		{name: "structured member name warren's", ct: "application/cloudevents+json", body: structured(`"event_id":"ev-2"`),
			wantErr: `the member "event_id" is not a legal attribute name`},
		{name: "structured id a number", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":7,"source":"/s","type":"t"}`,
			wantErr: "id is an Integer, not a String"},
		{name: "structured id null", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":null,"source":"/s","type":"t"}`,
			wantErr: "the required attribute id is missing"},
		{name: "structured id an unpaired surrogate", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":"a\ud800","source":"/s","type":"t"}`,
			wantErr: `id: an unpaired surrogate (\uD800)`},
		{name: "structured id a reversed surrogate pair", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":"a\udc00\ud800","source":"/s","type":"t"}`,
			wantErr: `an unpaired surrogate (\uDC00)`},
		{name: "structured id a surrogate pair", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":"a\ud83d\ude00","source":"/s","type":"t"}`,
			check: func(e cloudevents.Event) string { return want(e.Event.ID == "a😀", "id a😀") }},
		{name: "structured time a number", ct: "application/cloudevents+json", body: structured(`"time":1714557600`),
			wantErr: "time: an Integer is not a Timestamp"},
		{name: "structured extension an object", ct: "application/cloudevents+json", body: structured(`"tenant":{"a":1}`),
			wantErr: "tenant: a JSON object is not a CloudEvents type"},
		{name: "structured extension a fraction", ct: "application/cloudevents+json", body: structured(`"ratio":1.5`),
			wantErr: "ratio: the number 1.5 is not a CloudEvents Integer"},
		{name: "structured extension an exponent", ct: "application/cloudevents+json", body: structured(`"n":1e3`),
			wantErr: "the number 1e3 is not a CloudEvents Integer"},
		{name: "structured extension past 32 bits", ct: "application/cloudevents+json", body: structured(`"n":99999999999`),
			wantErr: "outside a CloudEvents Integer's range"},
		{name: "structured extension -0", ct: "application/cloudevents+json", body: structured(`"n":-0`),
			check: func(e cloudevents.Event) string { return want(string(e.Event.Extra["n"]) == "0", "n 0") }},
		{name: "structured extension null: unset", ct: "application/cloudevents+json", body: structured(`"tenant":null,"dataschema":null`),
			check: func(e cloudevents.Event) string { return want(e.Event.Extra == nil && e.DataSchema == "", "nothing") }},
		{name: "structured extension a megabyte", ct: "application/cloudevents+json", body: structured(`"tenant":"` + megabyte + `"`),
			wantErr: "tenant: it is 1048576 bytes"},
		{name: "structured datacontenttype XML", ct: "application/cloudevents+json", body: structured(`"datacontenttype":"application/xml"`),
			wantErr: `datacontenttype "application/xml" is not JSON`},
		{name: "structured datacontenttype a number", ct: "application/cloudevents+json", body: structured(`"datacontenttype":5`),
			wantErr: "datacontenttype is an Integer, not a String"},
		{name: "structured data a string", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":"e","source":"/s","type":"t","data":"{\"data\":{}}"}`,
			wantErr: "data must be a JSON object (warren's payload: data and previous_attributes), got a string"},
		{name: "structured data and data_base64", ct: "application/cloudevents+json",
			body:    `{"specversion":"1.0","id":"e","source":"/s","type":"t","data":{},"data_base64":"e30="}`,
			wantErr: "the body has both data and data_base64"},
		{name: "structured data_base64", ct: "application/cloudevents+json",
			body: `{"specversion":"1.0","id":"e","source":"/s","type":"t","data_base64":"` + base64.StdEncoding.EncodeToString([]byte(payload)) + `"}`,
			check: func(e cloudevents.Event) string {
				return want(string(e.Event.Payload.Data) == `{"id":"i-1"}`, "the payload")
			}},
		{name: "structured data_base64 not base64", ct: "application/cloudevents+json",
			body:    `{"specversion":"1.0","id":"e","source":"/s","type":"t","data_base64":"{}"}`,
			wantErr: "data_base64 is not base64"},
		{name: "structured data_base64 a number", ct: "application/cloudevents+json",
			body:    `{"specversion":"1.0","id":"e","source":"/s","type":"t","data_base64":5}`,
			wantErr: "data_base64 is a number, not a base64 string"},
		{name: "structured data_base64 not JSON", ct: "application/cloudevents+json",
			body:    `{"specversion":"1.0","id":"e","source":"/s","type":"t","data_base64":"` + base64.StdEncoding.EncodeToString([]byte("\x00\x01")) + `"}`,
			wantErr: "data is not valid JSON"},
		{name: "structured, no data", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":"e","source":"/s","type":"t"}`,
			check: func(e cloudevents.Event) string { return want(e.Event.Payload.Data == nil, "no payload") }},
		{name: "structured data too deep", ct: "application/cloudevents+json", body: `{"specversion":"1.0","id":"e","source":"/s","type":"t","data":` + deep + `}`,
			wantErr: "body is not valid JSON"},

		// Structured mode with headers too: they must agree with the body.
		{name: "structured with agreeing headers", ct: "application/cloudevents+json",
			headers: amqp.Table{"cloudEvents:id": "ev-1", "cloudEvents:time": time.Unix(1714557600, 0)},
			body:    structured(`"time":"2024-05-01T12:00:00+02:00"`),
			check:   func(e cloudevents.Event) string { return want(e.Event.ID == "ev-1", "the event") }},
		{name: "structured with an AMQP timestamp header: the body's time in whole seconds", ct: "application/cloudevents+json",
			headers: amqp.Table{"cloudEvents:time": time.Unix(1714557600, 0)}, body: structured(`"time":"2024-05-01T10:00:00.5Z"`),
			check: wantTime("2024-05-01T10:00:00.5Z")},
		{name: "structured with an AMQP timestamp header a second off", ct: "application/cloudevents+json",
			headers: amqp.Table{"cloudEvents:time": time.Unix(1714557601, 0)}, body: structured(`"time":"2024-05-01T10:00:00.5Z"`),
			wantErr: "the header for time says"},
		{name: "structured id repeated under an escaped name", ct: "application/cloudevents+json", body: structured(`"i\u0064":"ev-2"`),
			wantErr: `the member "id" appears twice`},
		{name: "structured with a header for another id", ct: "application/cloudevents+json", headers: amqp.Table{"cloudEvents:id": "ev-2"},
			body: structured(""), wantErr: `the header for id says "ev-2", the structured body "ev-1"`},
		{name: "structured with a header the body lacks", ct: "application/cloudevents+json", headers: amqp.Table{"cloudEvents:tenant": "acme"},
			body: structured(""), wantErr: "the header for tenant has no counterpart in the structured body"},
		{name: "structured with a header for another time", ct: "application/cloudevents+json", headers: amqp.Table{"cloudEvents:time": "2024-05-01T10:00:01Z"},
			body: structured(`"time":"2024-05-01T10:00:00Z"`), wantErr: "the header for time says"},
		{name: "structured with a bad header", ct: "application/cloudevents+json", headers: amqp.Table{"cloudEvents:id": 5.5},
			body: structured(""), wantErr: "a floating-point number is not a CloudEvents type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := cloudevents.Decode(c.ct, c.headers, []byte(c.body))
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if c.check != nil {
					if msg := c.check(got); msg != "" {
						t.Errorf("want %s; got %+v", msg, got)
					}
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode succeeded with %+v; want an error with %q", got, c.wantErr)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("error %q; want it to say %q", err, c.wantErr)
			}
			undecodable(t, err)
			if !strings.HasPrefix(err.Error(), "cloudevents: ") || len(err.Error()) > 400 {
				t.Errorf("error %.500q: want it to start with cloudevents: and stay short", err)
			}
		})
	}
}

// undecodable fails t unless err is what the consumer dead-letters at
// once as undecodable.
func undecodable(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, warren.ErrInvalidEvent) || !errors.Is(err, warren.ErrUndecodable) || !errors.Is(err, warren.ErrPermanent) {
		t.Errorf("error %v: want it to match ErrInvalidEvent, ErrUndecodable and ErrPermanent", err)
	}
	if o, _ := warren.Classify(err); o != warren.OutcomePermanent {
		t.Errorf("error %v classifies as %v, want permanent", err, o)
	}
}

func want(ok bool, what string) string {
	if ok {
		return ""
	}
	return what
}

func wantTime(rfc3339 string) func(cloudevents.Event) string {
	return func(e cloudevents.Event) string {
		w, _ := time.Parse(time.RFC3339Nano, rfc3339)
		if !e.Event.CreatedAt.Equal(w) || e.Event.CreatedAt.Location() != time.UTC {
			return "CreatedAt " + rfc3339 + " in UTC, got " + e.Event.CreatedAt.String()
		}
		return ""
	}
}

// A body of many megabytes decodes in either mode, in time linear in its
// size: the codec bounds no body, the consumer does (MaxBodyBytes).
func TestDecodeHugeBody(t *testing.T) {
	big := `{"data":{"blob":"` + strings.Repeat("a", 16<<20) + `"},"previous_attributes":null}`
	for _, c := range []struct{ ct, body string }{
		{"application/json", big},
		{cloudevents.StructuredContentType, `{"specversion":"1.0","id":"e","source":"/s","type":"t","data":` + big + `}`},
	} {
		got, err := cloudevents.Decode(c.ct, headers(), []byte(c.body))
		if c.ct == cloudevents.StructuredContentType {
			got, err = cloudevents.Decode(c.ct, nil, []byte(c.body))
		}
		if err != nil {
			t.Fatalf("%s: %v", c.ct, err)
		}
		if len(got.Event.Payload.Data) != 16<<20+11 {
			t.Errorf("%s: data of %d bytes", c.ct, len(got.Event.Payload.Data))
		}
	}
}

// What Encode refuses: a source that is no URI-reference, settings it does
// not know, and events a CloudEvent cannot carry, each with an error that
// names the field.
func TestEncodeRefuses(t *testing.T) {
	ok := warren.Event{ID: "e", Type: "t"}
	cases := []struct {
		name    string
		enc     cloudevents.Encoder
		ev      warren.Event
		wantErr string
		invalid bool // the event's fault: wraps ErrInvalidEvent
	}{
		{"no source", cloudevents.Encoder{}, ok, "source is required", false},
		{"a source with a space", cloudevents.Encoder{Source: "my service"}, ok, `the byte ' ' at 2 is not allowed in a URI (escape it as %20)`, false},
		{"a source with a bad escape", cloudevents.Encoder{Source: "/a%2"}, ok, "is not followed by two hex digits", false},
		{"a source with a newline", cloudevents.Encoder{Source: "/a\n"}, ok, "is not allowed in a URI", false},
		{"a source with non-ASCII", cloudevents.Encoder{Source: "/é"}, ok, "is not allowed in a URI", false},
		{"an unknown mode", cloudevents.Encoder{Source: "/s", Mode: 7}, ok, "unknown content mode Mode(7)", false},
		{"an unknown prefix", cloudevents.Encoder{Source: "/s", Prefix: "ce-"}, ok, `header prefix "ce-"`, false},
		{"no id", cloudevents.Encoder{Source: "/s"}, warren.Event{Type: "t"}, "event_id is missing", true},
		{"an entity type with a newline", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", EntityType: "a\nb"},
			"entity_type cannot be the entitytype attribute: it holds a control character (U+000A", true},
		{"an entity id with a noncharacter", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", EntityID: "a\ufffe"},
			"entity_id cannot be the subject attribute: it holds a noncharacter (U+FFFE", true},
		{"a workspace id not UTF-8", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", WorkspaceID: "\xff"},
			"workspace_id cannot be the workspaceid attribute: it is not valid UTF-8", true},
		{"a version of 10 KiB", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", Version: strings.Repeat("1", 10<<10)},
			"version cannot be the version attribute: it is 10240 bytes", true},
		{"a time in the year 10000", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
			"created_at cannot be the time attribute: the year 10000 is outside RFC 3339's range", true},
		{"payload data not JSON", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", Payload: warren.Payload{Data: json.RawMessage(`{`)}},
			"payload", true},
		{"payload data not UTF-8", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", Payload: warren.Payload{Data: json.RawMessage("\"\xff\"")}},
			"payload is not UTF-8", true},
		{"an extra field not JSON", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", Extra: map[string]json.RawMessage{"a": json.RawMessage(`nope`)}},
			`extra field "a" holds invalid JSON`, true},
		{"an extra field with a noncharacter", cloudevents.Encoder{Source: "/s"}, warren.Event{ID: "e", Type: "t", Extra: map[string]json.RawMessage{"a_b": json.RawMessage("\"\ufdd0\"")}},
			"the extra fields cannot be the warrenextra attribute: it holds a noncharacter (U+FDD0", true},
	}
	for _, c := range cases {
		for _, mode := range []cloudevents.Mode{cloudevents.Binary, cloudevents.Structured} {
			c.enc.Mode = max(c.enc.Mode, mode)
			_, err := c.enc.Encode(c.ev)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s, %v: %v; want an error saying %q", c.name, mode, err, c.wantErr)
				continue
			}
			if errors.Is(err, warren.ErrInvalidEvent) != c.invalid {
				t.Errorf("%s: errors.Is(%v, ErrInvalidEvent) = %v, want %v", c.name, err, !c.invalid, c.invalid)
			}
			// Validate finds the encoder's faults alone, as Encode words them.
			if verr := c.enc.Validate(); (verr != nil) == c.invalid || (verr != nil && verr.Error() != err.Error()) {
				t.Errorf("%s: Validate() = %v; Encode said %v", c.name, verr, err)
			}
		}
	}
}

// IsCloudEvent tells CloudEvents from warren's and Plane's envelopes.
func TestIsCloudEvent(t *testing.T) {
	for _, c := range []struct {
		ct   string
		h    amqp.Table
		want bool
	}{
		{"application/json", nil, false},
		{"", amqp.Table{"x-warren-entity-id": "e", "traceparent": "00-x"}, false},
		{"application/json", amqp.Table{"cloudEvents:specversion": "1.0"}, true},
		{"application/json", amqp.Table{"cloudEvents_id": "e"}, true},
		{"", amqp.Table{"cloudevents:id": "e"}, true}, // for Decode to refuse
		{"application/cloudevents+json", nil, true},
		{" Application/CloudEvents+JSON; charset=utf-8", nil, true},
		{"application/cloudevents-batch+json", nil, true},
		{"application/cloudeventsx", nil, true},
	} {
		if got := cloudevents.IsCloudEvent(c.ct, c.h); got != c.want {
			t.Errorf("IsCloudEvent(%q, %v) = %v, want %v", c.ct, c.h, got, c.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []cloudevents.Mode{cloudevents.Binary, cloudevents.Structured} {
		if got, err := cloudevents.ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := cloudevents.ParseMode("Binary"); err == nil {
		t.Error("ParseMode(Binary) succeeded")
	}
}

func TestPublisherSource(t *testing.T) {
	for _, c := range []struct {
		p    warren.PublisherInfo
		want string
	}{
		{warren.PublisherInfo{Name: "plane-event-stream", Source: "outbox-poller", Instance: "api-1"}, "/plane-event-stream/outbox-poller"},
		{warren.PublisherInfo{Name: "my relay", Source: "a/b"}, "/my%20relay/a%2Fb"},
		{warren.PublisherInfo{Source: "warren-relay"}, "/warren-relay"},
		{warren.PublisherInfo{}, ""},
	} {
		got := cloudevents.PublisherSource(c.p)
		if got != c.want {
			t.Errorf("PublisherSource(%+v) = %q, want %q", c.p, got, c.want)
		}
		if got != "" {
			if _, err := (cloudevents.Encoder{Source: got}).Encode(warren.Event{ID: "e", Type: "t"}); err != nil {
				t.Errorf("Encoder{Source: %q}: %v", got, err)
			}
		}
	}
}

// A binary-mode time header of AMQP's timestamp type reaches years RFC
// 3339 cannot write: Decode refuses one past 9999, so every event it
// accepts is one Encode and warren's envelope write back.
func TestDecodeRefusesATimestampPastYear9999(t *testing.T) {
	h := amqp.Table{
		"cloudEvents:specversion": "1.0", "cloudEvents:id": "e1", "cloudEvents:source": "/x", "cloudEvents:type": "a.b",
		"cloudEvents:time": time.Unix(1<<40, 0),
	}
	if ce, err := cloudevents.Decode("application/json", h, []byte(`{"data":{}}`)); err == nil {
		t.Errorf("decoded a time in the year %d, which Encode cannot write", ce.Event.CreatedAt.Year())
	}
	h["cloudEvents:time"] = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	if _, err := cloudevents.Decode("application/json", h, []byte(`{"data":{}}`)); err != nil {
		t.Errorf("the last second of 9999: %v", err)
	}
}
