package cloudevents_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// Every header Encode writes is one amqp091-go can write and a consumer's
// amqp091-go read back (names of at most 255 bytes, values of types the
// table holds), and fits the content header a warren producer may send,
// for events of every shape.
func TestEncodedHeadersArePublishable(t *testing.T) {
	ev := warren.Event{ID: "e", Type: "t", Extra: map[string]json.RawMessage{
		"n": json.RawMessage(`-2147483648`), "b": json.RawMessage(`false`),
		strings.Repeat("n", 243): json.RawMessage(`"the longest name a header holds with its prefix"`),
		strings.Repeat("m", 244): json.RawMessage(`"one byte more: into warrenextra"`),
	}}
	for _, enc := range encoders {
		m, err := enc.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := amqpx.CheckContentHeader(amqp.Publishing{ContentType: m.ContentType, Headers: m.Headers}); err != nil {
			t.Errorf("%s: %v", name(enc), err)
		}
	}
}

// Through the broker, hostile headers keep the types the unit tests give
// them (an int32, a table, bytes, a float, a decimal, a timestamp of whole
// seconds), and Decode refuses each with its error; the legal ones decode.
func TestHostileHeadersThroughTheBroker(t *testing.T) {
	ch := testenv.Channel(t)
	queue := testenv.Name(t, "q")
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	testenv.CleanupQueues(t, queue)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		headers amqp.Table
		wantErr string
		want    func(cloudevents.Event) bool
	}{
		{headers: headers("cloudEvents:id", int32(42)), wantErr: "id is an Integer, not a String"},
		{headers: headers("cloudEvents:id", amqp.Table{"a": "b"}), wantErr: "header cloudEvents:id: a table is not a CloudEvents type"},
		{headers: headers("cloudEvents:id", []byte("ev-1")), wantErr: "id is Binary, not a String"},
		{headers: headers("cloudEvents:id", 1.5), wantErr: "a floating-point number is not a CloudEvents type"},
		{headers: headers("cloudEvents:id", amqp.Decimal{Scale: 2, Value: 150}), wantErr: "a decimal is not a CloudEvents type"},
		{headers: headers("cloudEvents:id", []any{"a"}), wantErr: "an array is not a CloudEvents type"},
		{headers: headers("cloudEvents:id", strings.Repeat("x", 100<<10)), wantErr: "it is 102400 bytes, more than the 8192"},
		{headers: headers("cloudEvents_tenant", "a"), wantErr: "the headers mix the prefixes"},
		{headers: headers("cloudEvents:payload", "x"), wantErr: "the extension attribute payload is named like a field of warren's envelope"},
		{headers: headers("cloudEvents:time", time.Date(2024, 5, 1, 10, 0, 0, 999, time.UTC), "cloudEvents:n", int64(7), "cloudEvents:b", true),
			want: func(e cloudevents.Event) bool {
				return e.Event.CreatedAt.Equal(time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)) &&
					reflect.DeepEqual(e.Event.Extra, map[string]json.RawMessage{"n": json.RawMessage("7"), "b": json.RawMessage("true")})
			}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, c := range cases {
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false,
			amqp.Publishing{ContentType: "application/json", Headers: c.headers, Body: []byte(payload), MessageId: string(rune('a' + i))})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := conf.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("case %d: not confirmed: %v", i, err)
		}
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		var d amqp.Delivery
		select {
		case d = <-deliveries:
		case <-ctx.Done():
			t.Fatalf("case %d: no delivery", i)
		}
		got, err := cloudevents.Decode(d.ContentType, d.Headers, d.Body)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("case %d: %v", i, err)
		case c.wantErr == "" && !c.want(got):
			t.Errorf("case %d: got %+v", i, got.Event)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("case %d: %v; want an error saying %q", i, err, c.wantErr)
		case c.wantErr != "":
			undecodable(t, err)
		}
	}
}
