package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/internal/amqpx"
)

// fate is what must become of one hostile message at one consumer.
type fate struct {
	// class, when set, is the dead-letter class the message must carry in
	// the consumer's DLQ, with errSubstr in its error text.
	class     dlq.Class
	errSubstr string
	// delivered (webhook only): the receiver must accept the event once.
	// It may be set with class: the receiver takes the event and another
	// endpoint refuses it.
	delivered bool
}

func deadAs(class dlq.Class, errSubstr string) fate { return fate{class: class, errSubstr: errSubstr} }

var (
	delivered = fate{delivered: true}
	// ignored: acknowledged without an effect (the automation's filters
	// skip it) and never dead-lettered.
	ignored = fate{}
)

// hostileCase is one kind of input that no well-behaved producer sends.
type hostileCase struct {
	name string
	// build returns the message for the id; body-level cases put the id in
	// the message_id property only, since their body cannot carry it.
	build func(id string) amqp.Publishing
	// copies is how many messages of the case one burst sends (default 1).
	copies int
	// refusedOnce: the receiver answers 503 to the first delivery, so the
	// webhook must retry it.
	refusedOnce bool
	webhook     fate
	automation  fate
}

// hostileBodyLimit is the consumers' default MaxBodyBytes; the huge case
// must exceed it.
const hostileBodyLimit = 1 << 20

// validEvent is a well-formed Plane envelope with the given id and type.
func validEvent(id, eventType string) map[string]any {
	return map[string]any{
		"event_id": id, "event_type": eventType, "entity_type": "issue", "entity_id": "hostile-" + id,
		"workspace_id": "ws-hostile", "project_id": "proj-hostile", "initiator_id": "mallory",
		"initiator_type": "USER", "created_at": time.Now().UTC().Format(time.RFC3339Nano), "version": "1.0",
		"payload": map[string]any{"data": map[string]any{"id": "hostile-" + id, "state_id": "todo"}, "previous_attributes": nil},
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func jsonMessage(id string, body []byte) amqp.Publishing {
	return amqp.Publishing{
		MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Timestamp: time.Now(), Body: body,
	}
}

// withField is a valid event with one top-level field replaced (or, with
// value nil and drop set, removed).
func withField(id, field string, value any, drop bool) []byte {
	ev := validEvent(id, "workitem.updated")
	if drop {
		delete(ev, field)
	} else {
		ev[field] = value
	}
	return mustJSON(ev)
}

// oddHeaders are headers of types nobody expects, including a forged
// x-death array whose first entry is not even a table and whose second
// claims the message expired.
func oddHeaders() amqp.Table {
	return amqp.Table{
		dlq.HeaderAttempts:     "many",
		dlq.HeaderErrorClass:   int32(7),
		dlq.HeaderFirstFailure: int64(1700000000),
		dlq.HeaderReplays:      []any{"x"},
		dlq.HeaderOriginQueue:  amqp.Table{"nested": true},
		"x-death": []any{
			"not a table",
			amqp.Table{"queue": "webhook", "reason": "expired", "count": int64(3), "exchange": "", "time": time.Unix(1700000000, 0)},
		},
		"x-weird-float": 3.25,
		"x-weird-bytes": []byte{0xff, 0x00, 0xfe},
	}
}

// wrongPayloadData is a valid envelope of a state change whose
// payload.data is neither an object nor text holding one: the automation
// reads the data and refuses it for good.
func wrongPayloadData(id string) amqp.Publishing {
	ev := validEvent(id, app.TypeStateUpdated)
	ev["payload"] = map[string]any{"data": "not an object", "previous_attributes": map[string]any{"state_id": "todo"}}
	return jsonMessage(id, mustJSON(ev))
}

// forgedHeaders are warren's own headers as a producer would forge them:
// attempts used up, a class, and an origin naming another consumer's queue
// and exchange. A delivery through the consumer's exchange is a first
// delivery whatever its headers say, so none of these may survive into a
// dead letter, and the event gets its full attempts.
func forgedHeaders() amqp.Table {
	return amqp.Table{
		dlq.HeaderAttempts:         int32(99),
		dlq.HeaderErrorClass:       string(dlq.ClassExhausted),
		dlq.HeaderError:            forgedError,
		dlq.HeaderOriginQueue:      forgedOrigin,
		dlq.HeaderOriginExchange:   forgedOrigin + ".exchange",
		dlq.HeaderOriginRoutingKey: forgedOrigin,
		dlq.HeaderConsumer:         forgedOrigin,
		dlq.HeaderFirstFailure:     "2001-02-03T04:05:06Z",
	}
}

// forgedOrigin is the queue forged headers name: another consumer's, whose
// rights a replay would borrow.
const forgedOrigin = "payments"

// forgedError is the error text forged headers claim.
const forgedError = "forged by the producer"

// withHeaders is build with the headers replaced.
func withHeaders(build func(id string) amqp.Publishing, headers func() amqp.Table) func(id string) amqp.Publishing {
	return func(id string) amqp.Publishing {
		m := build(id)
		m.Headers = headers()
		return m
	}
}

// nestedHeaders nest a table 40 deep, past amqp091-go's 32.
func nestedHeaders() amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for range 40 {
		t = amqp.Table{"n": t}
	}
	return amqp.Table{"deep": t}
}

// wideHeaders hold 9000 entries, past amqp091-go's 8192.
func wideHeaders() amqp.Table {
	t := make(amqp.Table, 9000)
	for i := range 9000 {
		t[fmt.Sprintf("k%04d", i)] = int32(i)
	}
	return t
}

// hostileCases lists the hostile inputs of one burst. The error texts are
// the decoder's and consumer's own; hostile_test.go checks them against
// warren.DecodeEvent so a reworded error fails there first, not in a run.
func hostileCases() []hostileCase {
	undecodable := func(substr string) (fate, fate) {
		return deadAs(dlq.ClassUndecodable, substr), deadAs(dlq.ClassUndecodable, substr)
	}
	c := func(name string, build func(id string) amqp.Publishing, w, a fate) hostileCase {
		return hostileCase{name: name, build: build, webhook: w, automation: a}
	}
	body := func(f func(id string) []byte) func(id string) amqp.Publishing {
		return func(id string) amqp.Publishing { return jsonMessage(id, f(id)) }
	}
	var cases []hostileCase
	add := func(name string, f func(id string) []byte, substr string) {
		w, a := undecodable(substr)
		cases = append(cases, c(name, body(f), w, a))
	}
	add("malformed-json", func(id string) []byte {
		return []byte(`{"event_id": "` + id + `", "event_type": "workitem.updated", "payload": {"data": `)
	}, "invalid event")
	add("missing-event-id", func(id string) []byte { return withField(id, "event_id", nil, true) }, "event_id is missing or empty")
	add("empty-event-id", func(id string) []byte { return withField(id, "event_id", "", false) }, "event_id is missing or empty")
	add("blank-event-id", func(id string) []byte { return withField(id, "event_id", " \t ", false) }, "event_id is missing or empty")
	add("missing-event-type", func(id string) []byte { return withField(id, "event_type", nil, true) }, "event_type is missing or empty")
	add("event-id-number", func(id string) []byte { return withField(id, "event_id", 42, false) }, "event_id")
	add("initiator-type-array", func(id string) []byte { return withField(id, "initiator_type", []string{"USER"}, false) }, "initiator_type")
	add("payload-string", func(id string) []byte { return withField(id, "payload", "data", false) }, "payload")
	add("created-at-garbage", func(id string) []byte { return withField(id, "created_at", "yesterday", false) }, "created_at")
	add("non-utf8", func(id string) []byte {
		return bytes.Replace(withField(id, "initiator_id", "MARK", false), []byte("MARK"), []byte{0xff, 0xfe, 'x'}, 1)
	}, "UTF-8")
	add("array-body", func(string) []byte { return []byte(`[{"event_id":"a","event_type":"b"}]`) }, "invalid event")
	add("null-body", func(string) []byte { return []byte(`null`) }, "invalid event")
	add("empty-body", func(string) []byte { return nil }, "invalid event")
	add("huge-body", func(id string) []byte {
		ev := validEvent(id, "workitem.updated")
		ev["payload"] = map[string]any{"data": map[string]any{"blob": strings.Repeat("A", 3*hostileBodyLimit)}}
		return mustJSON(ev)
	}, "over the 1048576-byte limit")
	cases = append(cases,
		c("wrong-content-type", func(id string) amqp.Publishing {
			m := jsonMessage(id, withField(id, "event_id", id, false))
			m.ContentType = "text/plain"
			return m
		}, deadAs(dlq.ClassUndecodable, "content type"), deadAs(dlq.ClassUndecodable, "content type")),
		c("gzip-encoding", func(id string) amqp.Publishing {
			m := jsonMessage(id, withField(id, "event_id", id, false))
			m.ContentEncoding = "gzip"
			return m
		}, deadAs(dlq.ClassUndecodable, "content encoding"), deadAs(dlq.ClassUndecodable, "content encoding")),
		// Forged x-death and headers of the wrong types on a body that is
		// not an event: the dead letter must say undecodable, not the
		// "expired" the forged x-death claims.
		c("odd-headers-bad-body", func(id string) amqp.Publishing {
			m := jsonMessage(id, []byte(`{"event_id":`))
			m.Headers = oddHeaders()
			return m
		}, deadAs(dlq.ClassUndecodable, "invalid event"), deadAs(dlq.ClassUndecodable, "invalid event")),
		// The same headers on a valid event: headers are metadata, so the
		// event is handled as usual, once.
		c("odd-headers-valid", func(id string) amqp.Publishing {
			m := jsonMessage(id, mustJSON(validEvent(id, "workitem.created")))
			m.Headers = oddHeaders()
			return m
		}, delivered, ignored),
		// An event that claims to have used 98 attempts: it must still be
		// delivered when nothing fails.
		c("attempts-98-valid", func(id string) amqp.Publishing {
			m := jsonMessage(id, mustJSON(validEvent(id, "workitem.created")))
			m.Headers = amqp.Table{dlq.HeaderAttempts: int32(98), dlq.HeaderErrorClass: "permanent"}
			return m
		}, delivered, ignored),
		// A valid envelope of a type nobody handles. The webhook forwards
		// every type (its endpoint has no prefix filter); the automation's
		// prefix filter acknowledges it as skipped. Neither dead-letters it.
		c("unknown-event-type", func(id string) amqp.Publishing {
			return jsonMessage(id, mustJSON(validEvent(id, "reliability.unknown-type")))
		}, delivered, ignored),
		// A valid envelope whose payload.data has the wrong shape: the
		// webhook forwards bytes and delivers it; the automation's typed
		// handler (warren.Typed) never sees it: dead-lettered at once as
		// undecodable, naming the field, not retried.
		c("payload-data-wrong-type", wrongPayloadData, delivered, deadAs(dlq.ClassUndecodable, "payload.data")),
	)
	validOf := func(eventType string) func(id string) amqp.Publishing {
		return func(id string) amqp.Publishing { return jsonMessage(id, mustJSON(validEvent(id, eventType))) }
	}
	// The endpoints that only take hostile types (see hostileEndpoints):
	// the receiver, which takes every type, gets these events too.
	refused := func(substr string) fate { return fate{delivered: true, class: dlq.ClassPermanent, errSubstr: substr} }
	cases = append(cases,
		// The endpoint answers 307 to a second receiver: a sender that
		// follows it re-sends the signed body there and counts the event
		// delivered. Not following it, the 3xx is a refusal (finding 2).
		c("redirecting-endpoint", validOf(redirectPrefix+"created"), refused("307"), ignored),
		// The endpoint's URL carries a password and a token and it refuses
		// every delivery: its URL reaches the error, which must reach no
		// log line or dead letter unredacted (finding 1).
		c("secret-url-endpoint", validOf(secretPrefix+"created"), refused("400"), ignored),
		// Forged attempts on an event the receiver refuses once: it must be
		// retried and delivered, not dead-lettered as exhausted (finding 3).
		hostileCase{name: "forged-headers-refused-once", build: withHeaders(validOf("workitem.created"), forgedHeaders),
			refusedOnce: true, webhook: delivered, automation: ignored},
		// Forged headers on a body that is not an event, and on an event
		// the automation refuses: the dead letters must record attempt 1,
		// this consumer's queue and the real exchange (finding 3).
		c("forged-headers-bad-body", withHeaders(body(func(id string) []byte { return []byte(`{"event_id":"` + id + `"`) }), forgedHeaders),
			deadAs(dlq.ClassUndecodable, "invalid event"), deadAs(dlq.ClassUndecodable, "invalid event")),
		c("forged-headers-refused", withHeaders(wrongPayloadData, forgedHeaders), delivered, deadAs(dlq.ClassUndecodable, "payload.data")),
		// The same refusal through the secret endpoint, with forged
		// headers: both findings at once.
		c("forged-headers-secret-url", withHeaders(validOf(secretPrefix+"updated"), forgedHeaders), refused("400"), ignored),
	)
	// Headers RabbitMQ accepts and amqp091-go refuses to read: each used
	// to close the consumer's connection at every delivery and stall its
	// queue for good. warren's connections replace them, and both
	// consumers must dead-letter the event as undecodable, saying why,
	// while every real event behind it is delivered within the run.
	cases = append(cases,
		c("headers-nested-40", withHeaders(validOf("workitem.created"), nestedHeaders),
			deadAs(dlq.ClassUndecodable, "nested deeper than 32 levels"), deadAs(dlq.ClassUndecodable, "nested deeper than 32 levels")),
		c("headers-9000-entries", withHeaders(validOf("workitem.created"), wideHeaders),
			deadAs(dlq.ClassUndecodable, "more than 8192 entries"), deadAs(dlq.ClassUndecodable, "more than 8192 entries")),
		// Readable, but a retry or dead letter with warren's record would
		// be over frame_max (128 KiB): the move used to fail for ever,
		// then the event was dead-lettered as undecodable. Now a copy
		// drops the producer's headers instead (dlq.Fit): the event is
		// delivered.
		c("headers-near-frame-max", withHeaders(validOf("workitem.created"), func() amqp.Table { return amqp.Table{"big": strings.Repeat("x", 130800)} }),
			delivered, delivered),
	)
	// A flood of poison: the consumers must dead-letter it without
	// slowing the real events behind it.
	flood := c("poison-flood", body(func(id string) []byte { return []byte(`{"event_id":"` + id + `",`) }),
		deadAs(dlq.ClassUndecodable, "invalid event"), deadAs(dlq.ClassUndecodable, "invalid event"))
	flood.copies = 100
	cases = append(cases, flood)
	return cases
}

// hostileMessage is one hostile message sent, and what must become of it.
type hostileMessage struct {
	id     string
	kind   string
	sentAt time.Time
	// retried: the publish was repeated after an error, so the broker may
	// hold two copies.
	retried    bool
	webhook    fate
	automation fate
}

// hostileID names message copy n of a case in a burst.
func hostileID(run string, burst int, name string, n, copies int) string {
	if copies <= 1 {
		return fmt.Sprintf("%s-hostile-b%d-%s", run, burst, name)
	}
	return fmt.Sprintf("%s-hostile-b%d-%s-%03d", run, burst, name, n)
}

// sendHostile publishes one burst of every hostile case straight to the
// exchange, with publisher confirms, retrying through broker faults.
// refuseOnce is told the ids of the cases the receiver must refuse once,
// before they are published.
func sendHostile(ctx context.Context, amqpURL, exchange, run string, burst int, refuseOnce func(ids ...string)) ([]hostileMessage, error) {
	var out []hostileMessage
	var conn *amqp.Connection
	var pub *amqpx.Publisher
	closeConn := func() {
		if pub != nil {
			pub.Close()
			pub = nil
		}
		if conn != nil {
			conn.Close()
			conn = nil
		}
	}
	defer closeConn()
	for _, hc := range hostileCases() {
		copies := max(hc.copies, 1)
		for n := range copies {
			id := hostileID(run, burst, hc.name, n, copies)
			hm := hostileMessage{id: id, kind: hc.name, webhook: hc.webhook, automation: hc.automation}
			if hc.refusedOnce {
				refuseOnce(id)
			}
			deadline := time.Now().Add(time.Minute)
			for attempt := 0; ; attempt++ {
				var err error
				if pub == nil {
					conn, err = amqpx.Dial(ctx, amqpURL, amqpx.DialOptions{Name: "reliability hostile publisher"})
					if err == nil {
						pub, err = amqpx.NewPublisher(ctx, conn, 16)
					}
				}
				if err == nil {
					pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					hm.sentAt = time.Now()
					err = pub.Publish(pctx, exchange, "", hc.build(id))
					cancel()
				}
				if err == nil {
					break
				}
				closeConn()
				if attempt > 0 || !strings.Contains(err.Error(), "dial") {
					// A publish that failed after it was sent may still
					// have reached the queue.
					hm.retried = true
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					return out, fmt.Errorf("publish hostile %s: %w", id, err)
				}
				select {
				case <-ctx.Done():
					return out, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
			out = append(out, hm)
		}
	}
	return out, nil
}

// The webhook service has, besides the receiver, two endpoints that take
// only hostile event types (WEBHOOK_URL's prefix filter), served by
// hostileEndpoints.
const (
	// redirectPrefix: the endpoint answers 307 to a second receiver, the
	// redirect target, which must see nothing.
	redirectPrefix = "reliability.redirect."
	// secretPrefix: the endpoint's URL carries a password, a token and,
	// Slack-style, a key in its path, and it refuses every delivery with
	// 400 and a body quoting the path, so the URL reaches the error.
	secretPrefix = "reliability.secret."
	// The secrets in that URL. None may appear in a log line or a
	// dead-letter header.
	endpointUser     = "hostile-user"
	endpointPassword = "pw-Hunter2-never-logged"
	endpointToken    = "tok-5e3c9a-never-logged"
	endpointPathKey  = "key-7Fq2Lx9v-never-logged"
)

// hostileEndpoints serves the redirecting and the refusing endpoint, and
// the redirect target, which counts every request that reaches it.
type hostileEndpoints struct {
	redirectURL, secretURL string
	targetHits             atomic.Int64
	closers                []func() error
}

// startHostileEndpoints listens on two local ports: the endpoints, and the
// redirect target, a separate server as the internal address a hostile
// endpoint would point at.
func startHostileEndpoints() (*hostileEndpoints, error) {
	e := &hostileEndpoints{}
	target := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.targetHits.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK) // a follower would count the event delivered
	})
	targetURL, err := e.serve(target)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, targetURL+"/hook", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/refuse/", func(w http.ResponseWriter, r *http.Request) {
		// Quoting the request's path, as many error pages do.
		http.Error(w, "reliability: "+r.URL.Path+" refuses every delivery", http.StatusBadRequest)
	})
	base, err := e.serve(mux)
	if err != nil {
		e.close()
		return nil, err
	}
	host := strings.TrimPrefix(base, "http://")
	e.redirectURL = base + "/redirect"
	e.secretURL = "http://" + endpointUser + ":" + endpointPassword + "@" + host + "/refuse/services/T0RELIAB/B0RELIAB/" + endpointPathKey + "?tenant=acme&token=" + endpointToken
	return e, nil
}

func (e *hostileEndpoints) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	e.closers = append(e.closers, srv.Close)
	return "http://" + ln.Addr().String(), nil
}

func (e *hostileEndpoints) close() {
	for _, c := range e.closers {
		c()
	}
}

// webhookURLs is WEBHOOK_URL's entries for the two endpoints.
func (e *hostileEndpoints) webhookURLs() string {
	return redirectPrefix + "=" + e.redirectURL + "," + secretPrefix + "=" + e.secretURL
}

// secret is one string that must never leave the processes.
type secret struct{ what, value string }

// runSecrets lists the secrets of a run: the refusing endpoint's
// password, token, path key and basic-auth credentials, and the signing
// secret.
func runSecrets() []secret {
	return []secret{
		{"endpoint password", endpointPassword},
		{"endpoint token", endpointToken},
		{"endpoint path key", endpointPathKey},
		{"endpoint basic-auth credentials", base64.StdEncoding.EncodeToString([]byte(endpointUser + ":" + endpointPassword))},
		{"webhook signing secret", webhookSecret},
	}
}

// secretsIn names the secrets found in s.
func secretsIn(s string, secrets []secret) []string {
	var out []string
	for _, sec := range secrets {
		if strings.Contains(s, sec.value) {
			out = append(out, sec.what)
		}
	}
	return out
}

// secretsInHeaders names, per header, the secrets found in its value,
// however it is nested (tables, arrays, byte strings).
func secretsInHeaders(headers amqp.Table, secrets []secret) []string {
	var out []string
	var walk func(name string, v any)
	walk = func(name string, v any) {
		switch v := v.(type) {
		case string:
			for _, what := range secretsIn(v, secrets) {
				out = append(out, what+" in "+name)
			}
		case []byte:
			walk(name, string(v))
		case amqp.Table:
			for k, x := range v {
				walk(name+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", name, i), x)
			}
		}
	}
	for k, v := range headers {
		walk(k, v)
	}
	slices.Sort(out)
	return out
}
