package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	dedupredis "github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
)

func TestParseEndpoints(t *testing.T) {
	got, err := ParseEndpoints(" https://a.example/hook , workitem.|label.=https://b.example/hook?token=x=y ,")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].URL != "https://a.example/hook" || len(got[0].Prefixes) != 0 ||
		got[1].URL != "https://b.example/hook?token=x=y" || len(got[1].Prefixes) != 2 || got[1].Prefixes[1] != "label." {
		t.Fatalf("ParseEndpoints = %+v", got)
	}
	for _, bad := range []string{"", " , ", "ftp://x", "workitem.=not-a-url", "https://u:50%off@h/", "https:///nohost?token=tok-in-query", "ftp://h/?token=tok-in-query"} {
		_, err := ParseEndpoints(bad)
		if err == nil {
			t.Errorf("ParseEndpoints(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "50%off") || strings.Contains(err.Error(), "tok-in-query") {
			t.Errorf("ParseEndpoints(%q) error carries a secret: %v", bad, err)
		}
	}
}

// endpoint is a test receiver whose answers are scripted per call.
type endpoint struct {
	mu      sync.Mutex
	answers []int // consumed in order; 200 once exhausted
	posts   int
}

func (e *endpoint) server(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.posts++
		status := 200
		if len(e.answers) > 0 {
			status, e.answers = e.answers[0], e.answers[1:]
		}
		e.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func (e *endpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.posts
}

func newService(t *testing.T, urls ...string) *Service {
	t.Helper()
	var eps []Endpoint
	for _, u := range urls {
		eps = append(eps, Endpoint{URL: u})
	}
	s, err := New(Config{Consumer: consumer.Config{Name: "hooks"}, Endpoints: eps, Secret: []byte("k"), Timeout: time.Second, Lease: time.Minute}, testenv.MemoryStore(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// When one endpoint fails, the retry posts only to it: the endpoint that
// already accepted the event does not get it twice.
func TestDeliverRetriesOnlyTheEndpointThatFailed(t *testing.T) {
	ok, flaky := &endpoint{}, &endpoint{answers: []int{503}}
	s := newService(t, ok.server(t).URL, flaky.server(t).URL)
	m := message(t)
	m.Consumer = "hooks"

	err := s.deliver(context.Background(), m)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeRetry {
		t.Fatalf("first delivery: %v (%v), want a retry", outcome, err)
	}
	if err := s.deliver(context.Background(), m); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if ok.count() != 1 || flaky.count() != 2 {
		t.Errorf("posts: healthy endpoint %d (want 1), flaky endpoint %d (want 2)", ok.count(), flaky.count())
	}
	if err := s.deliver(context.Background(), m); !errors.Is(err, warren.ErrDuplicate) {
		t.Errorf("a third delivery gave %v, want a duplicate", err)
	}
}

// A refusal dead-letters the event only once no endpoint can still take it;
// after a replay, only the endpoint that refused it is tried again.
func TestDeliverDeadLettersWhenOnlyRefusalsRemain(t *testing.T) {
	ok, refusing := &endpoint{answers: []int{503}}, &endpoint{answers: []int{400, 400}}
	s := newService(t, ok.server(t).URL, refusing.server(t).URL)
	m := message(t)
	m.Consumer = "hooks"

	if outcome, _ := warren.Classify(s.deliver(context.Background(), m)); outcome != warren.OutcomeRetry {
		t.Fatalf("while an endpoint may still take it, the event must be retried, got %v", outcome)
	}
	err := s.deliver(context.Background(), m)
	var se *StatusError
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomePermanent || !errors.As(err, &se) || se.StatusCode != 400 {
		t.Fatalf("only a refusal left: %v (%v), want permanent with the 400", outcome, err)
	}
	// The receiver is fixed and the event replayed.
	if err := s.deliver(context.Background(), m); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	if ok.count() != 2 || refusing.count() != 3 {
		t.Errorf("posts: %d and %d, want 2 and 3", ok.count(), refusing.count())
	}
}

func TestDeliverSkipsEventsNoEndpointWants(t *testing.T) {
	e := &endpoint{}
	s, err := New(Config{Endpoints: []Endpoint{{URL: e.server(t).URL, Prefixes: []string{"label."}}}, Secret: []byte("k")}, testenv.MemoryStore(t))
	if err != nil {
		t.Fatal(err)
	}
	m := message(t)
	m.Consumer = "webhook"
	if err := s.deliver(context.Background(), m); !errors.Is(err, warren.ErrSkipped) || e.count() != 0 {
		t.Fatalf("deliver = %v with %d posts, want a skip and none", err, e.count())
	}
}

// A dedup store that cannot be reached defers the event without spending
// an attempt, and shows in the consumer's readiness; nothing is POSTed
// unclaimed. Once the store is back, the event is delivered once. Before,
// a store outage was a transient failure: after MaxAttempts the event was
// dead-lettered as exhausted though no POST was ever tried.
func TestDeliverDefersWhileTheStoreIsDown(t *testing.T) {
	rdb, proxy := testenv.RedisBehindProxy(t)
	prefix := testenv.Name(t, "wh") + ":"
	testenv.DeleteRedisKeysOnCleanup(t, prefix)
	store, err := dedupredis.New(rdb, dedupredis.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{}
	s, err := New(Config{Consumer: consumer.Config{Name: "hooks"}, Endpoints: []Endpoint{{URL: e.server(t).URL}},
		Secret: []byte("k"), Timeout: 5 * time.Second, Lease: time.Minute, StoreTimeout: 5 * time.Second}, store)
	if err != nil {
		t.Fatal(err)
	}
	m := message(t)
	m.Consumer = "hooks"

	proxy.SetUp(false)
	err = s.deliver(context.Background(), m)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeDeferred || !errors.Is(err, warren.ErrUnavailable) {
		t.Fatalf("store down: %v (%v), want a deferral for an unavailable dependency", outcome, err)
	}
	if e.count() != 0 {
		t.Fatalf("%d POSTs while the store was down, want none", e.count())
	}
	if h := s.Health(); len(h.Dependencies) != 1 || h.Dependencies[0].Up {
		t.Fatalf("health while the store is down: %+v", h.Dependencies)
	}

	proxy.SetUp(true)
	if err := s.deliver(context.Background(), m); err != nil {
		t.Fatalf("store back: %v", err)
	}
	if e.count() != 1 || !s.Health().Dependencies[0].Up {
		t.Fatalf("after the store came back: %d POSTs (want 1), dependency %+v", e.count(), s.Health().Dependencies)
	}
}
