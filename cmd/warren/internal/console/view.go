package console

import (
	"strings"
	"time"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/redact"
)

// shownText is producer text (an id, a property, a header's name, an
// error) as pages show it: secrets masked.
func shownText(s string) string { return redact.Secrets(s) }

// messageView is a dead message as every page shows it: each field that
// holds producer text masked once, here, so that no template shows one
// unmasked by forgetting to mask it. Pages render from it, never from a
// dlqtool.Message.
type messageView struct {
	Position    int
	Fingerprint string // names the message in forms: exactly this one
	EventID     string
	EventType   string
	Signature   string // as shown: see shownSignature
	GroupID     string

	Error                                         string
	Class                                         string
	Contract, Field                               string // what broke, when the error named it
	Attempts, Replays                             int
	FirstFailure, LastFailure                     time.Time
	OriginQueue, OriginExchange, OriginRoutingKey string
	Consumer, Host                                string
	Problems                                      []string
	FirstDeath                                    deathView
	Deaths                                        []deathView

	Properties []header // the AMQP properties that hold text, by name
	Headers    []header
	Body       body
}

// deathView is an x-death entry as pages show it.
type deathView struct {
	Queue, Reason, Exchange, RoutingKeys string
	Count                                int64
	Time                                 time.Time
}

func newDeathView(d dlq.Death) deathView {
	keys := make([]string, len(d.RoutingKeys))
	for i, k := range d.RoutingKeys {
		keys[i] = shownText(k)
	}
	return deathView{Queue: shownText(d.Queue), Reason: shownText(d.Reason), Exchange: shownText(d.Exchange), RoutingKeys: strings.Join(keys, ", "), Count: d.Count, Time: d.Time}
}

// newMessageView is m as pages show it. Properties, headers and body are
// rendered only when full: a group's page lists many messages and shows
// none of them.
func newMessageView(m *read, full bool) messageView {
	md := m.Metadata
	v := messageView{
		Position: m.Position, Fingerprint: m.Fingerprint,
		EventID: shownText(m.EventID), EventType: shownText(m.EventType),
		Signature: shownSignature(&m.Message), GroupID: groupID(m.Signature()),
		Error: shownText(md.Error), Class: shownText(string(md.Class)), Contract: shownText(md.Contract), Field: shownText(md.Field), Attempts: md.Attempts, Replays: md.Replays,
		FirstFailure: md.FirstFailure, LastFailure: md.LastFailure,
		OriginQueue: shownText(md.OriginQueue), OriginExchange: shownText(md.OriginExchange), OriginRoutingKey: shownText(md.OriginRoutingKey),
		Consumer: shownText(md.Consumer), Host: shownText(md.Host),
		FirstDeath: newDeathView(md.FirstDeath),
	}
	for _, p := range md.Problems {
		v.Problems = append(v.Problems, shownText(p))
	}
	for _, d := range md.Deaths {
		v.Deaths = append(v.Deaths, newDeathView(d))
	}
	if !full {
		return v
	}
	for _, p := range []header{
		{"content_type", m.ContentType}, {"content_encoding", m.ContentEncoding}, {"message_id", m.MessageId}, {"type", m.Type},
		{"timestamp", formatTime(m.Timestamp)}, {"app_id", m.AppId}, {"correlation_id", m.CorrelationId},
		{"reply_to", m.ReplyTo}, {"user_id", m.UserId}, {"expiration", m.Expiration},
	} {
		if p.Value != "" {
			v.Properties = append(v.Properties, header{p.Name, shownText(p.Value)})
		}
	}
	v.Headers, v.Body = headerRows(m.Headers), bodyView(m.Body)
	return v
}
