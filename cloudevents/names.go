package cloudevents

// Constants of the CloudEvents specification v1.0.2 that the codec uses.
const (
	// SpecVersion is the specversion every event is encoded with and the
	// only one Decode accepts.
	SpecVersion = "1.0"
	// StructuredContentType is the content type of a structured-mode
	// message: the JSON event format.
	StructuredContentType = "application/cloudevents+json"
	// DataContentType is the datacontenttype of every event warren
	// encodes: its data, the payload, is a JSON object.
	DataContentType = "application/json"
	// PrefixColon and PrefixUnderscore are the two prefixes the AMQP
	// binding allows for the application properties (headers, on AMQP
	// 0-9-1) of a binary-mode message: "cloudEvents:" in v1.0.2 and in
	// the Go SDK's AMQP protocol, "cloudEvents_" added later for JMS
	// clients, whose property names cannot hold a colon.
	PrefixColon      = "cloudEvents:"
	PrefixUnderscore = "cloudEvents_"
)

// The context attributes of CloudEvents v1.0.2.
const (
	attrID              = "id"
	attrSource          = "source"
	attrSpecVersion     = "specversion"
	attrType            = "type"
	attrDataContentType = "datacontenttype"
	attrDataSchema      = "dataschema"
	attrSubject         = "subject"
	attrTime            = "time"
)

// extraAttr is the extension attribute that carries the event's Extra
// fields that cannot travel as extension attributes of their own: a JSON
// object, as a String.
const extraAttr = "warrenextra"

// warrenAttrs are the extension attributes that carry warren's envelope
// fields, in the order they are written: each is the field's JSON name
// without its underscores. The event's id, type, entity id and creation
// time travel as the core attributes id, type, subject and time.
var warrenAttrs = [...]struct {
	attr, field string // the attribute's name, the envelope field's JSON name
}{
	{"entitytype", "entity_type"},
	{"workspaceid", "workspace_id"},
	{"projectid", "project_id"},
	{"initiatorid", "initiator_id"},
	{"initiatortype", "initiator_type"},
	{"version", "version"},
}

// coreAttrs are the attribute names of the specification itself, which an
// Extra field never takes, and data, which is no attribute but is a member
// of the JSON format.
var coreAttrs = [...]string{attrID, attrSource, attrSpecVersion, attrType, attrDataContentType, attrDataSchema, attrSubject, attrTime, "data"}

// envelopeFields are the JSON names of warren's envelope fields: an Extra
// entry of one of these names is never written (warren's own encoder
// lets the field win), and warrenextra must not carry one.
var envelopeFields = [...]string{"event_id", "event_type", "entity_type", "entity_id", "workspace_id",
	"project_id", "initiator_id", "initiator_type", "payload", "created_at", "version"}

// reserved reports whether name is an attribute the mapping uses, which
// an Extra field cannot take as an extension attribute of its own.
func reserved(name string) bool {
	if name == extraAttr {
		return true
	}
	for _, a := range coreAttrs {
		if a == name {
			return true
		}
	}
	for _, a := range warrenAttrs {
		if a.attr == name {
			return true
		}
	}
	return false
}

func envelopeField(name string) bool {
	for _, f := range envelopeFields {
		if f == name {
			return true
		}
	}
	return false
}

// legalName reports whether name follows the specification's naming
// convention: one or more lower-case ASCII letters or digits. (Names
// SHOULD NOT exceed 20 characters; longer ones are legal and accepted.)
func legalName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// maxAttributeBytes bounds the value of every attribute but warrenextra,
// in a header or in a structured body: 8 KiB, an HTTP server's usual
// limit on one header line, where a CloudEvent's attributes may travel
// next. warren's own values are UUIDs, names and URIs; an id or a type is
// further held to 255 bytes by [warren.Event.Validate].
const maxAttributeBytes = 8 << 10

// maxNameBytes bounds an attribute's name: with its prefix it is a header
// name, which AMQP 0-9-1 holds to 255 bytes. (The specification asks for
// at most 20.)
const maxNameBytes = 255 - len(PrefixColon)
