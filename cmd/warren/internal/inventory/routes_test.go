package inventory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
)

func TestTopicMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, key string
		want         bool
	}{
		{"#", "anything.at.all", true},
		{"#", "", true},
		{"invoice.#", "invoice", true},
		{"invoice.#", "invoice.paid", true},
		{"invoice.#", "invoice.paid.late", true},
		{"invoice.#", "invoices.paid", false},
		{"invoice.*", "invoice.paid", true},
		{"invoice.*", "invoice.paid.late", false},
		{"invoice.*", "invoice", false},
		{"*.paid", "invoice.paid", true},
		{"#.paid", "a.b.paid", true},
		{"#.paid", "paid", true},
		{"a.#.z", "a.z", true},
		{"a.#.z", "a.b.c.z", true},
		{"a.#.z", "a.b.c", false},
		{"workitem.updated", "workitem.updated", true},
		{"workitem.updated", "workitem.updated.x", false},
		{"", "", true},
		{"", "a", false},
	} {
		if got := inventory.TopicMatch(c.pattern, c.key); got != c.want {
			t.Errorf("TopicMatch(%q, %q) = %v, want %v", c.pattern, c.key, got, c.want)
		}
	}
}

// fakeAPI answers the management API's exchange and binding reads from
// a table of path → handler; what it does not know is a 404 as
// RabbitMQ's.
func fakeAPI(t *testing.T, routes map[string]http.HandlerFunc) *inventory.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := routes[r.URL.EscapedPath()]; ok {
			h(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":"Object Not Found","reason":"Not Found"}`)
	}))
	t.Cleanup(srv.Close)
	inv, err := inventory.New("amqp://guest:guest@127.0.0.1:5672/", srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func answer(v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
}

func exchange(name, typ string) map[string]any {
	return map[string]any{"name": name, "type": typ, "durable": true, "auto_delete": false}
}

func binding(source, dest, destType, key string) map[string]any {
	return map[string]any{"source": source, "destination": dest, "destination_type": destType, "routing_key": key}
}

// The walk follows bindings through other exchanges, tells which keys
// each queue receives, and is not caught by a loop of exchanges.
func TestReceiversFollowBindings(t *testing.T) {
	t.Parallel()
	inv := fakeAPI(t, map[string]http.HandlerFunc{
		"/api/exchanges/%2F/events": answer(exchange("events", "fanout")),
		"/api/exchanges/%2F/events/bindings/source": answer([]any{
			binding("events", "webhook", "queue", ""),
			binding("events", "router", "exchange", ""),
			binding("events", "hash", "exchange", ""),
		}),
		"/api/exchanges/%2F/router": answer(exchange("router", "topic")),
		"/api/exchanges/%2F/router/bindings/source": answer([]any{
			binding("router", "billing", "queue", "invoice.#"),
			binding("router", "billing", "queue", "refund.*"),
			binding("router", "events", "exchange", "#"), // a loop back
		}),
		"/api/exchanges/%2F/hash": answer(exchange("hash", "x-consistent-hash")),
		"/api/exchanges/%2F/hash/bindings/source": answer([]any{
			binding("hash", "sync.p1", "queue", "1"),
			binding("hash", "sync.p0", "queue", "1"),
		}),
	})
	rs, err := inv.Receivers(context.Background(), "events")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]inventory.Receiver{}
	var names []string
	for _, r := range rs {
		got[r.Queue] = r
		names = append(names, r.Queue)
	}
	if strings.Join(names, " ") != "billing sync.p0 sync.p1 webhook" {
		t.Fatalf("receivers %v", names)
	}
	b := got["billing"]
	if !b.Filtered() || !b.Exact() || !b.Receives("invoice.paid") || !b.Receives("refund.made") || b.Receives("refund.made.late") || b.Receives("workitem.updated") {
		t.Errorf("billing: %+v", b)
	}
	if r := b.Route(); !strings.Contains(r, "router (topic, key invoice.#)") || !strings.Contains(r, "events (fanout)") {
		t.Errorf("billing's route: %s", r)
	}
	for _, q := range []string{"webhook", "sync.p0"} {
		if r := got[q]; r.Filtered() || !r.Exact() || !r.Receives("anything") {
			t.Errorf("%s: %+v", q, r)
		}
	}
}

// What a management API (or what answers in its place) can do wrong is
// an error saying what happened, never a document of a guess.
func TestReceiversOddAnswers(t *testing.T) {
	t.Parallel()
	evs := "/api/exchanges/%2F/events"
	for _, c := range []struct {
		name   string
		routes map[string]http.HandlerFunc
		want   string
	}{
		{"no such exchange", nil, `no exchange "events" in the vhost "/"`},
		{"refused credentials", map[string]http.HandlerFunc{evs: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
		}}, "refused the credentials"},
		{"a redirect", map[string]http.HandlerFunc{evs: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://login.example.invalid/?next=x", http.StatusFound)
		}}, "redirects to http://login.example.invalid/"},
		{"a login page", map[string]http.HandlerFunc{evs: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>sign in</html>")
		}}, `the answer is "text/html", not the API's JSON`},
		{"another exchange", map[string]http.HandlerFunc{evs: answer(exchange("other", "fanout"))}, `answered with "other"`},
		{"null", map[string]http.HandlerFunc{evs: answer(nil)}, `answered with ""`},
		{"a wrong type", map[string]http.HandlerFunc{evs: answer(map[string]any{"name": 7})}, "cannot unmarshal number"},
		{"a binding to a stream of nowhere", map[string]http.HandlerFunc{
			evs:                      answer(exchange("events", "fanout")),
			evs + "/bindings/source": answer([]any{binding("events", "x", "topic-thing", "")}),
		}, `destination type "topic-thing"`},
		{"a binding of another exchange", map[string]http.HandlerFunc{
			evs:                      answer(exchange("events", "fanout")),
			evs + "/bindings/source": answer([]any{binding("elsewhere", "q", "queue", "")}),
		}, "not a binding of it"},
		{"a binding without a destination", map[string]http.HandlerFunc{
			evs:                      answer(exchange("events", "fanout")),
			evs + "/bindings/source": answer([]any{map[string]any{"source": "events"}}),
		}, "not a binding of it"},
		{"a huge answer", map[string]http.HandlerFunc{
			evs: answer(exchange("events", "fanout")),
			evs + "/bindings/source": func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `[`)
				chunk := []byte(strings.Repeat(`{"source":"events","destination":"q","destination_type":"queue","routing_key":"k"},`, 1000))
				for range (65 << 20) / len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			},
		}, "answer too large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := fakeAPI(t, c.routes).Receivers(context.Background(), "events")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "guest:guest") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// A ring of exchanges bound to each other without end, each new, is
// followed only so far.
func TestReceiversEndlessExchanges(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		name, bindings := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/api/exchanges///"), "/bindings/source")
		if !bindings {
			json.NewEncoder(w).Encode(exchange(name, "fanout"))
			return
		}
		json.NewEncoder(w).Encode([]any{binding(name, name+"x", "exchange", "")})
	}))
	defer srv.Close()
	inv, err := inventory.New("amqp://guest:guest@127.0.0.1:5672/", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Receivers(context.Background(), "e"); err == nil || !strings.Contains(err.Error(), "more than 256 exchanges, counted") {
		t.Fatalf("%v", err)
	}
}

// A management API that is down is an error naming how to enable it.
func TestReceiversAPIDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	inv, err := inventory.New("amqp://guest:guest@127.0.0.1:5672/", "http://"+addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Receivers(context.Background(), "events"); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("%v", err)
	}
	if _, err := inv.Receivers(context.Background(), ""); err == nil || !strings.Contains(err.Error(), "default exchange") {
		t.Fatalf("the default exchange: %v", err)
	}
}
