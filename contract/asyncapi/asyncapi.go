package asyncapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
)

// Version is the AsyncAPI version of the documents [Document] writes.
const Version = "3.0.0"

// bindingVersion is the version of AsyncAPI's AMQP 0-9-1 bindings used.
const bindingVersion = "0.3.0"

// Defaults of a [Stream].
const (
	DefaultTitle    = "warren event stream"
	DefaultVersion  = "unversioned"
	DefaultExchange = "warren.events" // consumer.Config.Exchange's and the relays' default
)

// Stream is the deployment a document describes.
type Stream struct {
	// Title and Version are the document's info.title and info.version
	// (the version of the stream's description, not of warren). Default
	// DefaultTitle and DefaultVersion.
	Title, Version string
	// Description is the document's info.description, if any.
	Description string
	// Exchange is the exchange the relays publish to. Default
	// DefaultExchange.
	Exchange string
	// ExchangeType is its type: "fanout" (warren's, the default),
	// "topic", "direct" or "headers".
	ExchangeType string
	// ExchangeDeclaration is how the exchange was declared; the zero
	// value is how warren declares it (durable).
	ExchangeDeclaration Declaration
	// Vhost is the exchange's and the queues' virtual host. Default "/".
	Vhost string
	// Consumers read the stream, each from its own queues.
	Consumers []Consumer
}

// Consumer is one consumer of the stream.
type Consumer struct {
	// Name is the consumer's name (consumer.Config.Name).
	Name string
	// Handles are the prefixes its handlers are registered for
	// (BaseConsumer.Handle): it handles an event type that starts with
	// one of them, and acknowledges every other one unhandled. "" handles
	// every type; none given, every type that reaches its queues is
	// listed as handled, and the document says the prefixes were not
	// given.
	Handles []string
	// Queues are the queues it reads. None: one queue named Name, bound
	// to the exchange as warren binds it, receiving every event.
	Queues []Queue
}

// Queue is one queue a consumer reads.
type Queue struct {
	// Name is the queue's name.
	Name string
	// Route says, for the document's readers, how events reach the queue
	// from the exchange ("bound to warren.events (fanout)").
	Route string
	// Filtered means that only EventTypes reach the queue: a binding on
	// the way (to a topic or direct exchange) routes by key. When false,
	// every event does, as on warren's fanout exchange.
	Filtered   bool
	EventTypes []string
	// Declaration is how the queue was declared; the zero value is how
	// warren declares a consumer's queue (durable).
	Declaration Declaration
}

// Declaration is how an exchange or a queue was declared, where it is
// not as warren declares them: its zero value is warren's, durable, not
// auto-deleted, not exclusive.
type Declaration struct {
	Transient  bool // not durable: gone when the broker restarts
	AutoDelete bool // deleted when its last queue (exchange) or consumer (queue) goes
	Exclusive  bool // a queue only its declaring connection uses, deleted with it
}

// lifetime describes a declaration for a channel's description: "" for
// warren's.
func (d Declaration) lifetime() string {
	var parts []string
	if d.Transient {
		parts = append(parts, "transient (gone when the broker restarts)")
	}
	if d.AutoDelete {
		parts = append(parts, "auto-deleted")
	}
	if d.Exclusive {
		parts = append(parts, "exclusive to the connection that declared it")
	}
	if len(parts) == 0 {
		return ""
	}
	return " It is " + strings.Join(parts, ", ") + "."
}

// exchangeTypes are the types AsyncAPI's AMQP binding can name.
var exchangeTypes = []string{"fanout", "topic", "direct", "headers"}

// Document returns the AsyncAPI 3.0.0 document, as indented JSON, of the
// stream s carrying the events set has contracts for: a channel for the
// exchange, on which the relays send every event type (routing key the
// event type), a channel for each consumer's queue with the event types
// that reach it and an operation receiving those the consumer handles,
// and for each contract a message: warren's envelope with the contract's
// schema as payload.data. An event type without a contract is not in the
// document.
//
// The same set and stream give the same bytes. A contract the document
// cannot hold without changing its meaning is an [*UnportableError]; a
// name given twice, or one the broker could not have, is an error too.
func Document(set *contract.Set, s Stream) ([]byte, error) {
	s.Title = cmp.Or(s.Title, DefaultTitle)
	s.Version = cmp.Or(s.Version, DefaultVersion)
	s.Exchange = cmp.Or(s.Exchange, DefaultExchange)
	s.ExchangeType = cmp.Or(s.ExchangeType, "fanout")
	s.Vhost = cmp.Or(s.Vhost, "/")
	if err := checkName("exchange", s.Exchange); err != nil {
		return nil, err
	}
	if !slices.Contains(exchangeTypes, s.ExchangeType) {
		return nil, fmt.Errorf("asyncapi: exchange type %q: want one of %s", s.ExchangeType, strings.Join(exchangeTypes, ", "))
	}
	if err := checkName("vhost", s.Vhost); err != nil {
		return nil, err
	}
	consumers, err := normalise(s)
	if err != nil {
		return nil, err
	}
	var contracts []contract.Contract
	if set != nil {
		contracts = set.Contracts()
	}

	// Keys, one namespace per object of the document.
	msgNames := map[string]string{}
	for _, c := range contracts {
		msgNames[c.Key()] = c.Type + ".v" + c.Version
	}
	msgs, err := assign("message", msgNames)
	if err != nil {
		return nil, err
	}
	chanNames := map[string]string{"exchange " + s.Exchange: "exchange." + s.Exchange}
	opNames := map[string]string{"send " + s.Exchange: "send." + s.Exchange}
	for _, c := range consumers {
		for _, q := range c.Queues {
			chanNames["queue "+q.Name] = "queue." + q.Name
			opNames["receive "+q.Name] = "receive." + q.Name
		}
	}
	chans, err := assign("channel", chanNames)
	if err != nil {
		return nil, err
	}
	ops, err := assign("operation", opNames)
	if err != nil {
		return nil, err
	}

	doc := document{
		AsyncAPI:   Version,
		Info:       info{Title: s.Title, Version: s.Version, Description: s.Description},
		Channels:   map[string]any{},
		Operations: map[string]any{},
		Components: components{Messages: map[string]any{}, Schemas: map[string]any{"warren.envelope": envelopeSchema()}},
	}
	var types []string
	allMsgs := map[string]any{}
	for _, c := range contracts {
		id := msgs.key(c.Key())
		if _, clash := doc.Components.Schemas[id]; clash {
			// A contract's key has ".v" in it, the envelope's has not.
			return nil, fmt.Errorf("asyncapi: contract %s would share the key %s with the envelope", c.Key(), id)
		}
		placed, err := placeSchema(c, id)
		if err != nil {
			return nil, err
		}
		doc.Components.Schemas[id] = placed
		doc.Components.Messages[id] = message(c, id)
		allMsgs[id] = ref("#/components/messages/" + id)
		if !slices.Contains(types, c.Type) {
			types = append(types, c.Type)
		}
	}

	exchangeChan := chans.key("exchange " + s.Exchange)
	doc.Channels[exchangeChan] = map[string]any{
		"address":     "{eventType}",
		"title":       s.Exchange,
		"description": fmt.Sprintf("The %s exchange %s, which the relays publish every event to with its event type as the routing key.%s", s.ExchangeType, s.Exchange, s.ExchangeDeclaration.lifetime()),
		"parameters": map[string]any{"eventType": map[string]any{
			"description": "The routing key: the event's event_type. The examples are the types with a contract; others may be published.",
			"examples":    nonNil(types),
			"location":    "$message.payload#/event_type",
		}},
		"messages": allMsgs,
		"bindings": map[string]any{"amqp": map[string]any{
			"is": "routingKey",
			"exchange": map[string]any{
				"name": s.Exchange, "type": s.ExchangeType, "vhost": s.Vhost,
				"durable": !s.ExchangeDeclaration.Transient, "autoDelete": s.ExchangeDeclaration.AutoDelete,
			},
			"bindingVersion": bindingVersion,
		}},
	}
	doc.Operations[ops.key("send "+s.Exchange)] = map[string]any{
		"action":      "send",
		"title":       "Publish events",
		"description": "The outbox relay (warren relay run, or relay.New and relay/cdc in process) publishes each committed event, persistent, with mandatory set and a publisher confirm awaited: a message no queue takes is a failure, retried.",
		"channel":     ref("#/channels/" + exchangeChan),
		"messages":    channelRefs(exchangeChan, sortedKeys(allMsgs)),
		"bindings": map[string]any{"amqp": map[string]any{
			"deliveryMode": 2, "mandatory": true, "timestamp": true, "bindingVersion": bindingVersion,
		}},
	}
	for _, c := range consumers {
		for _, q := range c.Queues {
			chanKey := chans.key("queue " + q.Name)
			reaching := map[string]any{}
			var handled []string
			for _, ct := range contracts {
				if q.Filtered && !slices.Contains(q.EventTypes, ct.Type) {
					continue
				}
				id := msgs.key(ct.Key())
				reaching[id] = ref("#/components/messages/" + id)
				if handles(c.Handles, ct.Type) {
					handled = append(handled, id)
				}
			}
			route := cmp.Or(q.Route, fmt.Sprintf("bound to the %s exchange %s", s.ExchangeType, s.Exchange))
			doc.Channels[chanKey] = map[string]any{
				"address":     q.Name,
				"title":       q.Name,
				"description": fmt.Sprintf("The queue %s of the consumer %s, %s. Its messages are the event types with a contract that reach it.%s", q.Name, c.Name, route, q.Declaration.lifetime()),
				"messages":    reaching,
				"bindings": map[string]any{"amqp": map[string]any{
					"is": "queue",
					"queue": map[string]any{
						"name": q.Name, "vhost": s.Vhost,
						"durable": !q.Declaration.Transient, "exclusive": q.Declaration.Exclusive, "autoDelete": q.Declaration.AutoDelete,
					},
					"bindingVersion": bindingVersion,
				}},
			}
			slices.Sort(handled)
			doc.Operations[ops.key("receive "+q.Name)] = map[string]any{
				"action":      "receive",
				"title":       "Consumer " + c.Name,
				"description": receiveDescription(c),
				"channel":     ref("#/channels/" + chanKey),
				"messages":    channelRefs(chanKey, handled),
				"bindings":    map[string]any{"amqp": map[string]any{"ack": true, "bindingVersion": bindingVersion}},
			}
		}
	}

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("asyncapi: %w", err)
	}
	if err := checkRefs(buf.Bytes()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// handles reports whether a consumer registered for prefixes handles
// eventType, as its router decides; no prefixes given means every type.
func handles(prefixes []string, eventType string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(eventType, p) {
			return true
		}
	}
	return false
}

func receiveDescription(c Consumer) string {
	if len(c.Handles) == 0 {
		return fmt.Sprintf("The consumer %s. Its handlers' prefixes were not given: every event type that reaches its queue is listed as handled.", c.Name)
	}
	if slices.Contains(c.Handles, "") {
		return fmt.Sprintf("The consumer %s, whose handlers take every event type (one is registered for the prefix \"\").", c.Name)
	}
	quoted := make([]string, len(c.Handles))
	for i, p := range c.Handles {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf("The consumer %s, whose handlers are registered for the event-type prefixes %s. Every other event that reaches its queue is acknowledged unhandled (or dead-lettered, under consumer.DeadLetterUnhandled).", c.Name, strings.Join(quoted, ", "))
}

// normalise checks the consumers and fills in their default queue, in
// the document's order: by name, queues by name.
func normalise(s Stream) ([]Consumer, error) {
	out := make([]Consumer, 0, len(s.Consumers))
	owner := map[string]string{} // queue → consumer
	seen := map[string]bool{}
	for _, c := range s.Consumers {
		if err := checkName("consumer name", c.Name); err != nil {
			return nil, err
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("asyncapi: the consumer %q is given twice", c.Name)
		}
		seen[c.Name] = true
		c.Handles = slices.Compact(slices.Sorted(slices.Values(c.Handles)))
		c.Queues = slices.Clone(c.Queues)
		if len(c.Queues) == 0 {
			c.Queues = []Queue{{Name: c.Name}}
		}
		for i, q := range c.Queues {
			if err := checkName("queue", q.Name); err != nil {
				return nil, err
			}
			if other, dup := owner[q.Name]; dup {
				return nil, fmt.Errorf("asyncapi: the queue %q is given for both %q and %q; a queue is one consumer's", q.Name, other, c.Name)
			}
			owner[q.Name] = c.Name
			c.Queues[i].EventTypes = slices.Compact(slices.Sorted(slices.Values(q.EventTypes)))
		}
		slices.SortFunc(c.Queues, func(a, b Queue) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Consumer) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// checkName refuses a name RabbitMQ would not take: empty, over 255 bytes
// (an AMQP short string), or not UTF-8.
func checkName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("asyncapi: the %s is empty", what)
	case len(name) > 255:
		return fmt.Errorf("asyncapi: the %s %.40q… is %d bytes, more than the 255 AMQP allows", what, name, len(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("asyncapi: the %s %q is not UTF-8", what, name)
	}
	return nil
}

// document is an AsyncAPI document, its members in the spec's order.
type document struct {
	AsyncAPI   string         `json:"asyncapi"`
	Info       info           `json:"info"`
	Channels   map[string]any `json:"channels"`
	Operations map[string]any `json:"operations"`
	Components components     `json:"components"`
}

type info struct {
	Title       string `json:"title"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
}

type components struct {
	Schemas  map[string]any `json:"schemas"`
	Messages map[string]any `json:"messages"`
}

func ref(pointer string) map[string]any { return map[string]any{"$ref": pointer} }

// channelRefs refers to the channel's messages ids: an operation's
// messages must be its channel's, by reference to the channel.
func channelRefs(channel string, ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = ref("#/channels/" + channel + "/messages/" + id)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// message is the message of contract c: the envelope as warren's relays
// write it, with the contract as payload.data, and the AMQP properties
// and headers they set.
func message(c contract.Contract, id string) map[string]any {
	return map[string]any{
		"name":        c.Type,
		"title":       c.Type + " " + c.Version,
		"summary":     fmt.Sprintf("An event of type %s, envelope version %s; payload.data is the contract %s.", c.Type, c.Version, c.Key()),
		"contentType": "application/json",
		"headers": map[string]any{
			"type":        "object",
			"description": "The AMQP headers warren's relays set (none with the relay's Plane properties, which set only Plane's).",
			"properties": map[string]any{
				warren.HeaderInitiatorType: map[string]any{"type": "string", "description": "The event's initiator_type, repeated for tools that do not decode the body."},
				warren.HeaderEntityID:      map[string]any{"type": "string", "description": "The event's entity_id, repeated: partitioned consumers hash on it."},
				"traceparent":              map[string]any{"type": "string", "description": "W3C trace context of the producer's transaction, when it had one."},
				"tracestate":               map[string]any{"type": "string", "description": "W3C trace state, with traceparent."},
			},
		},
		"payload": map[string]any{
			"allOf": []any{
				ref("#/components/schemas/warren.envelope"),
				map[string]any{
					"type":     "object",
					"required": []any{"version", "payload"},
					"properties": map[string]any{
						"event_type": map[string]any{"const": c.Type},
						"version":    map[string]any{"const": c.Version},
						"payload": map[string]any{
							"type":     "object",
							"required": []any{"data"},
							"properties": map[string]any{"data": map[string]any{"anyOf": []any{
								ref("#/components/schemas/" + id),
								// contract.Set.Check, warren.Typed and
								// DecodeData read data written as a
								// string holding JSON as what it holds.
								map[string]any{
									"type":             "string",
									"contentMediaType": "application/json",
									"pattern":          `^\s*[\[{]`,
									"description":      "Plane's triggers write some data as a JSON string holding the object (\"{}\" on a delete): it is read, and checked against the contract, as the object it holds.",
								},
							}}},
						},
					},
				},
			},
		},
		"bindings": map[string]any{"amqp": map[string]any{"messageType": c.Type, "bindingVersion": bindingVersion}},
	}
}

// envelopeSchema is warren.Event on the wire, in either of its formats
// (warren.FormatWarren, warren.FormatPlane): what every message's payload
// is, its data the contract's.
func envelopeSchema() map[string]any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	nullable := func(desc string) map[string]any {
		return map[string]any{"type": []any{"string", "null"}, "description": desc}
	}
	return map[string]any{
		"title":                "warren envelope",
		"description":          "warren.Event as the relays write it: warren's format, or Plane's (warren.FormatPlane: every field, created_at as timestamp, and the publisher's fields). Members not listed here are kept when a consumer re-publishes the event (retry, dead letter, replay). warren.Event.Validate refuses an event_id or event_type that is empty, longer than 255 bytes, holds a control character or starts or ends with white space.",
		"type":                 "object",
		"required":             []any{"event_id", "event_type", "payload"},
		"additionalProperties": true,
		"properties": map[string]any{
			"event_id":       str("Unique: the idempotency key, and the AMQP message_id."),
			"event_type":     str("The event's type, e.g. workitem.updated: the AMQP type and routing key."),
			"entity_type":    str("The kind of entity changed, e.g. issue."),
			"entity_id":      str("The entity changed."),
			"workspace_id":   str("Left out by warren's format when empty."),
			"project_id":     nullable("Left out by warren's format when empty; null in Plane's."),
			"initiator_id":   nullable("Who made the change. Left out by warren's format when empty; null in Plane's."),
			"initiator_type": str("USER, SYSTEM.IMPORT, SYSTEM.AUTOMATION, …: consumers skip SYSTEM.* with middleware.SkipInitiators."),
			"payload": map[string]any{
				"type":        "object",
				"description": "The change. Plane's triggers write some data as a JSON string holding the object (\"{}\" on every soft delete), which consumers read, and contracts check, as that object.",
				"properties": map[string]any{
					"data":                map[string]any{"description": "The entity after the change: each message's contract."},
					"previous_attributes": map[string]any{"description": "The changed fields' old values; no contract covers it."},
				},
			},
			"created_at":         map[string]any{"type": "string", "format": "date-time", "description": "When the event was created (warren's format)."},
			"timestamp":          map[string]any{"type": "integer", "description": "When the event was created, in Unix seconds (Plane's format)."},
			"version":            str("The envelope's version: with event_type, it names the contract of payload.data."),
			"publisher":          str("Plane's format: the publishing service."),
			"publisher_instance": str("Plane's format: which process of it."),
			"source":             str("Plane's format: the component that produced the event."),
			"outbox_id":          map[string]any{"type": []any{"integer", "null"}, "description": "Plane's format: the outbox row's id."},
		},
	}
}
