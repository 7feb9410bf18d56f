package cloudevents_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
)

func exampleEvent() warren.Event {
	return warren.Event{
		ID: "9b2f1c9e", Type: "workitem.updated", EntityType: "issue", EntityID: "ISSUE-7",
		WorkspaceID: "ws-1", InitiatorType: warren.InitiatorUser, Version: "1.0",
		CreatedAt: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC),
		Payload:   warren.Payload{Data: json.RawMessage(`{"state":"done"}`), PreviousAttributes: json.RawMessage(`{"state":"todo"}`)},
	}
}

// In binary mode the attributes are headers, and the body is the payload.
func ExampleEncoder_Encode() {
	m, err := cloudevents.Encoder{Source: "/issues"}.Encode(exampleEvent())
	if err != nil {
		panic(err)
	}
	fmt.Println("content type:", m.ContentType)
	names := make([]string, 0, len(m.Headers))
	for name := range m.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Printf("%s: %v\n", name, m.Headers[name])
	}
	fmt.Printf("body: %s\n", m.Body)
	// The relay puts them into the message it publishes:
	_ = amqp.Publishing{ContentType: m.ContentType, Headers: m.Headers, Body: m.Body}
	// Output:
	// content type: application/json
	// cloudEvents:entitytype: issue
	// cloudEvents:id: 9b2f1c9e
	// cloudEvents:initiatortype: USER
	// cloudEvents:source: /issues
	// cloudEvents:specversion: 1.0
	// cloudEvents:subject: ISSUE-7
	// cloudEvents:time: 2026-12-07T10:00:00Z
	// cloudEvents:type: workitem.updated
	// cloudEvents:version: 1.0
	// cloudEvents:workspaceid: ws-1
	// body: {"data":{"state":"done"},"previous_attributes":{"state":"todo"}}
}

// In structured mode the body is the whole event in the JSON event format.
func ExampleEncoder_Encode_structured() {
	m, err := cloudevents.Encoder{Source: "/issues", Mode: cloudevents.Structured}.Encode(exampleEvent())
	if err != nil {
		panic(err)
	}
	fmt.Println("content type:", m.ContentType)
	fmt.Println("headers:", m.Headers == nil)
	fmt.Printf("body: %s\n", m.Body)
	// Output:
	// content type: application/cloudevents+json
	// headers: true
	// body: {"specversion":"1.0","id":"9b2f1c9e","source":"/issues","type":"workitem.updated","datacontenttype":"application/json","subject":"ISSUE-7","time":"2026-12-07T10:00:00Z","entitytype":"issue","workspaceid":"ws-1","initiatortype":"USER","version":"1.0","data":{"data":{"state":"done"},"previous_attributes":{"state":"todo"}}}
}

// A consumer reads a delivery in either mode; what it cannot read is an
// error the consumer dead-letters as undecodable.
func ExampleDecode() {
	d := amqp.Delivery{
		ContentType: "application/json",
		Headers: amqp.Table{
			"cloudEvents:specversion": "1.0", "cloudEvents:id": "A234-1234-1234",
			"cloudEvents:source": "https://example.com/issues", "cloudEvents:type": "workitem.created",
			"cloudEvents:subject": "ISSUE-8", "cloudEvents:time": "2018-04-05T17:31:00Z",
			"cloudEvents:tenant": "acme", "cloudEvents:retries": int32(3),
		},
		Body: []byte(`{"data":{"title":"New"},"previous_attributes":"{}"}`),
	}
	if !cloudevents.IsCloudEvent(d.ContentType, d.Headers) {
		panic("not a CloudEvent")
	}
	ce, err := cloudevents.Decode(d.ContentType, d.Headers, d.Body)
	if err != nil {
		panic(err)
	}
	ev := ce.Event
	fmt.Println(ce.Mode, ce.Source)
	fmt.Println(ev.ID, ev.Type, ev.EntityID, ev.CreatedAt)
	fmt.Printf("data %s, previous %s, tenant %s, retries %s\n", ev.Payload.Data, ev.Payload.PreviousAttributes, ev.Extra["tenant"], ev.Extra["retries"])

	d.Headers["cloudEvents:id"] = int32(42)
	_, err = cloudevents.Decode(d.ContentType, d.Headers, d.Body)
	fmt.Println(err)
	// Output:
	// binary https://example.com/issues
	// A234-1234-1234 workitem.created ISSUE-8 2018-04-05 17:31:00 +0000 UTC
	// data {"title":"New"}, previous "{}", tenant "acme", retries 3
	// cloudevents: id is an Integer, not a String
}

// IsCloudEvent tells a consumer which decoder a message needs.
func ExampleIsCloudEvent() {
	fmt.Println(cloudevents.IsCloudEvent("application/json", amqp.Table{"x-warren-entity-id": "ISSUE-7"}))
	fmt.Println(cloudevents.IsCloudEvent("application/json", amqp.Table{"cloudEvents:specversion": "1.0"}))
	fmt.Println(cloudevents.IsCloudEvent("application/cloudevents+json", nil))
	// Output:
	// false
	// true
	// true
}

// A relay that writes Plane's publisher fields names its events' source
// after them.
func ExamplePublisherSource() {
	fmt.Println(cloudevents.PublisherSource(warren.PublisherInfo{Name: "plane-event-stream", Source: "outbox-poller"}))
	// Output: /plane-event-stream/outbox-poller
}
