package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// A real relay held back by a consumer's queue (relay.Config's HoldBack)
// shows on the overview: the relays section names the queue, the
// consumer's row says it holds the relays back, and the queue's oldest
// waiting event shows how long it has waited. A relay that does not answer
// is shown as such, and the page still renders.
func TestOverviewShowsTheRelayHeldBackAndTheConsumersLag(t *testing.T) {
	t.Parallel()
	testenv.RequireManagement(t)
	var health atomic.Pointer[http.Handler]
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := health.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.Error(w, "the relay is not built yet", http.StatusServiceUnavailable)
	}))
	t.Cleanup(hs.Close)
	f := newFixture(t, console.Config{Relays: []string{hs.URL, "http://127.0.0.1:1"}})

	// The consumer is behind: three events created three minutes ago wait
	// in its queue, which is the relay's high-water mark.
	created := time.Now().Add(-3 * time.Minute)
	for range 3 {
		if err := f.ch.PublishWithContext(context.Background(), "", f.top.Consumer, false, false, amqp.Publishing{MessageId: "behind", Timestamp: created, Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	ob := testenv.NewOutboxTable(t)
	ob.Publish(testenv.OutboxEvent(testenv.Name(t, "held")))
	r, err := relay.New(relay.Config{
		Pool: ob.Pool, Table: ob.Table.Name(), AMQPURL: testenv.AMQPURL(t), Exchange: f.top.Exchange, Name: testenv.Name(t, "relay"),
		HoldBack: &relay.HoldBack{Queues: []string{f.top.Consumer}, HighWater: 3, Interval: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := r.HealthHandler()
	health.Store(&h)
	testenv.RunInBackground(t, r.Run)

	consumerRow := regexp.MustCompile(`(?s)<tr class="consumer" id="consumer-` + regexp.QuoteMeta(f.top.Consumer) + `".*?</tr>`)
	held := regexp.MustCompile(`held back by queue <a href="#consumer-` + regexp.QuoteMeta(f.top.Consumer) + `">`)
	// 3m when read at once; 4m if the management API is slow to show it.
	lag := regexp.MustCompile(`<td class="num queue-lag">[34]m</td>`)
	var body, row string
	testenv.WaitFor(t, 60*time.Second, "the overview to show the hold and the lag", func() bool {
		body = f.get("/").body
		row = consumerRow.FindString(body)
		return held.MatchString(body) && strings.Contains(row, "holds 1 of 2 relays back") && lag.MatchString(row)
	})
	if !strings.Contains(body, "not answering") {
		t.Errorf("the relay that does not answer is not shown as such:\n%s", body)
	}
	if n := ob.Count("state = 'pending'"); n != 1 {
		t.Errorf("%d outbox rows pending while held back, want the 1 written", n)
	}
}

// A relay address that is not http(s)://HOST is refused when the console
// is made, not at the first page.
func TestRelayAddressesAreChecked(t *testing.T) {
	for _, bad := range []string{"127.0.0.1:9464", "ftp://x", "http://", "http://u:secret@[::1", "http://x:1/healthz", "http://x:1/?a=1", "http://x:1#f", "http://x:99999", "http://:1"} {
		_, err := console.New(console.Config{Relays: []string{bad}})
		if err == nil || !strings.Contains(err.Error(), "http://HOST:PORT") || strings.Contains(err.Error(), "secret") {
			t.Errorf("Relays %q: %v", bad, err)
		}
	}
}

// fakeInventory lists fixed consumers: a unit test of the page's logic.
type fakeInventory []inventory.Consumer

func (f fakeInventory) Consumers(context.Context) ([]inventory.Consumer, error) { return f, nil }

// What the overview makes of relay addresses that do not answer as a
// relay does, and which consumer a hold names: a relay's redirect is not
// followed (it could read the console's own pages, or another host's),
// an answer other than 200 or 503, or a body without a relay's health, is
// "not answering"; a hold by a partition marks its consumer and the
// partition's row; a hold that names no queue marks nothing.
func TestOverviewRelayStates(t *testing.T) {
	held := func(by string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			json.NewEncoder(w).Encode(relay.Health{Alive: true, Ready: true, HeldBack: true, HeldBy: by, HeldSince: time.Now()})
		}
	}
	serve := func(h http.Handler) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL
	}
	elsewhere := serve(held("forged-by-redirect"))
	relays := []string{
		serve(http.RedirectHandler(elsewhere+"/healthz", http.StatusFound)),
		serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`{"error":"upstream connect error"}`))
		})),
		serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`null`)) })),
		serve(held("orders.p0")),
		serve(held("")),
	}
	s, err := console.New(console.Config{Relays: relays, Inventory: fakeInventory{
		{Name: "orders", Partitions: []inventory.Queue{{Name: "orders.p0"}, {Name: "orders.p1"}}},
		{Name: "plain", Queue: inventory.Queue{Name: "plain"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if strings.Contains(body, "forged-by-redirect") || strings.Count(body, "not answering") != 3 {
		t.Errorf("the redirect, the 502 and the null: want three relays not answering, and no redirect followed:\n%s", body)
	}
	orders := regexp.MustCompile(`(?s)<tr class="consumer" id="consumer-orders".*?</tr>`).FindString(body)
	partition := regexp.MustCompile(`(?s)<tr class="partition"><td class="consumer-name">↳ orders.p0.*?</tr>`).FindString(body)
	plain := regexp.MustCompile(`(?s)<tr class="consumer" id="consumer-plain".*?</tr>`).FindString(body)
	if !strings.Contains(orders, "holds 1 of 5 relays back") || !strings.Contains(partition, "holds 1 of 5 relays back") {
		t.Errorf("a hold by a partition: consumer row %q, partition row %q", orders, partition)
	}
	if strings.Contains(plain, "holds") {
		t.Errorf("a hold naming no queue marked a consumer: %q", plain)
	}
}
