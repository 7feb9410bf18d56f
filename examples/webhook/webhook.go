package webhook

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/middleware"
)

// Endpoint is one receiver and the event types it wants.
type Endpoint struct {
	URL string
	// Name names the endpoint in errors, logs and dead-letter headers;
	// empty means its scheme and host and a hash of the rest of its URL
	// (see Endpoint.name). The URL itself is never shown: its path, query
	// or userinfo may hold the endpoint's credentials.
	Name string
	// Secret signs the deliveries to this endpoint; empty means
	// Config.Secret. A secret per endpoint keeps a delivery captured at
	// one endpoint (or a leaked secret) from being accepted by another.
	Secret []byte
	// Prefixes limits the endpoint to event types starting with one of
	// them; empty means every event.
	Prefixes []string
}

func (e Endpoint) wants(eventType string) bool {
	if len(e.Prefixes) == 0 {
		return true
	}
	for _, p := range e.Prefixes {
		if strings.HasPrefix(eventType, p) {
			return true
		}
	}
	return false
}

// id names the endpoint in dedup keys without putting its URL, which may
// carry a token, into Redis.
func (e Endpoint) id() string { return urlHash(e.URL) }

// name names the endpoint in error and log text: Name, or what urlName
// makes of its URL.
func (e Endpoint) name() string { return cmp.Or(e.Name, urlName(e.URL)) }

// urlHash is a short, stable hash of raw, hex-encoded: too short to tell
// the URL's secrets, long enough to tell endpoints apart.
func urlHash(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:6])
}

// ParseEndpoints reads WEBHOOK_URL's format: comma-separated entries, each a
// URL or "prefix|prefix=URL" to limit the endpoint to those event types,
// e.g. "https://a.example/hook,workitem.|label.=https://b.example/hook".
func ParseEndpoints(s string) ([]Endpoint, error) {
	var out []Endpoint
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		var ep Endpoint
		if eq := strings.Index(entry, "="); eq >= 0 && eq < strings.Index(entry, "://") {
			for _, p := range strings.Split(entry[:eq], "|") {
				if p = strings.TrimSpace(p); p != "" {
					ep.Prefixes = append(ep.Prefixes, p)
				}
			}
			entry = entry[eq+1:]
		}
		// The entry is not quoted in the error: its URL may hold a token.
		if u, err := url.Parse(entry); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("webhook endpoint %d (%s) is not an http(s) URL", len(out)+1, urlName(entry))
		}
		ep.URL = entry
		out = append(out, ep)
	}
	if len(out) == 0 {
		return nil, errors.New("no webhook endpoint given (WEBHOOK_URL)")
	}
	return out, nil
}

// DefaultName is the consumer's name (and queue) when Config names none.
const DefaultName = "webhook"

// Config configures the service. Zero values mean the documented defaults.
type Config struct {
	// Consumer is the consumer's configuration; Name defaults to
	// DefaultName.
	Consumer  consumer.Config
	Endpoints []Endpoint
	// Secret signs the deliveries to endpoints without their own
	// Endpoint.Secret. Required unless every endpoint has one.
	Secret []byte
	// Timeout bounds one POST. Default 10s.
	Timeout time.Duration
	// Lease is how long a delivery to one endpoint keeps other workers off
	// it; it must exceed Timeout. Default 1 minute.
	Lease time.Duration
	// Client sends the requests. Default an http.Client with Timeout.
	Client *http.Client
	// StoreTimeout bounds each call to the dedup store, so a stalled store
	// holds a worker no longer than this. Default
	// middleware.DefaultStoreTimeout.
	StoreTimeout time.Duration
}

// Service is the webhook consumer.
type Service struct {
	*consumer.BaseConsumer
	sender    Sender
	endpoints []Endpoint
	store     dedup.Store // dedup.Bounded: every call bounded and reported
	lease     time.Duration
	log       *slog.Logger
}

// New builds the service. store remembers which endpoint took which event.
func New(cfg Config, store dedup.Store) (*Service, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("webhook: no endpoint (WEBHOOK_URL)")
	}
	for i, ep := range cfg.Endpoints {
		if len(ep.Secret) == 0 && len(cfg.Secret) == 0 {
			return nil, fmt.Errorf("webhook: endpoint %d (%s) has no signing secret, and there is no default (WEBHOOK_SECRET_%d, WEBHOOK_SECRET)", i+1, ep.name(), i+1)
		}
	}
	if store == nil {
		return nil, errors.New("webhook: a dedup store is required")
	}
	cfg.Consumer.Name = cmp.Or(cfg.Consumer.Name, DefaultName)
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Second)
	cfg.Lease = cmp.Or(cfg.Lease, time.Minute)
	if cfg.Lease <= cfg.Timeout {
		return nil, fmt.Errorf("webhook: Lease %v must exceed Timeout %v", cfg.Lease, cfg.Timeout)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	// The store's state shows in the consumer's readiness: while it is
	// down, events are deferred, not delivered.
	storeUp := warren.NewDependency("dedup")
	cfg.Consumer.Dependencies = append(cfg.Consumer.Dependencies, storeUp)
	base, err := consumer.New(cfg.Consumer)
	if err != nil {
		return nil, err
	}
	s := &Service{
		BaseConsumer: base,
		sender:       Sender{Client: cfg.Client, Secret: cfg.Secret},
		endpoints:    cfg.Endpoints,
		store:        dedup.Bounded(store, cmp.Or(cfg.StoreTimeout, middleware.DefaultStoreTimeout), storeUp),
		lease:        cfg.Lease,
		log:          base.Config().Logger.With("consumer", base.Config().Name),
	}
	s.Use(
		middleware.Recover(),
		middleware.Logging(base.Config().Logger, middleware.LoggingOptions{SuccessLevel: slog.LevelDebug}),
	)
	s.HandleFunc("", s.deliver)
	return s, nil
}

// deliver POSTs the event to every endpoint that wants it and has not taken
// it yet. Transient failures win over permanent ones: while any endpoint may
// still accept the event, it is retried (endpoints that refused it refuse
// again, harmlessly); once only refusals remain, it is dead-lettered. When
// the dedup store could not be asked and no POST failed, the event is
// deferred without spending an attempt, like middleware.Dedup does: a store
// outage must not dead-letter events that were never sent.
func (s *Service) deliver(ctx context.Context, m *warren.Message) error {
	var transient, permanent, storeDown []error
	var hint time.Duration
	wanted, already, busy := 0, 0, false
	for _, ep := range s.endpoints {
		if !ep.wants(m.Event.Type) {
			continue
		}
		wanted++
		key := dedup.Key(m.Consumer, ep.id()+":"+m.Event.ID) // ep.id has a fixed width
		claim, err := s.store.Claim(ctx, key, s.lease)
		if errors.Is(err, dedup.ErrRefused) {
			// The store answered, refusing this key: retried, and
			// dead-lettered if it keeps refusing, rather than held forever.
			transient = append(transient, fmt.Errorf("dedup store: %w", err))
			continue
		}
		if err != nil {
			storeDown = append(storeDown, fmt.Errorf("dedup store: %w", err))
			continue
		}
		switch claim.Result {
		case dedup.Done:
			already++
			continue
		case dedup.Busy:
			busy = true
			continue
		}
		err = s.sender.Send(ctx, ep, m)
		if err != nil {
			// Free the endpoint's key so the retry posts again.
			if rerr := s.store.Release(ctx, claim); rerr != nil {
				s.log.Warn("could not release a webhook claim; the retry waits for the lease", "key", key, "error", rerr)
			}
			if _, d := warren.Classify(err); d > hint {
				hint = d
			}
			if IsPermanent(err) {
				permanent = append(permanent, err)
			} else {
				transient = append(transient, err)
			}
			continue
		}
		if err := s.store.Complete(ctx, claim); err != nil {
			s.log.Warn("delivered, but the done-mark was not written; a redelivery may POST again", "key", key, "error", err)
		}
	}
	transient = append(transient, storeDown...)
	switch {
	case len(transient) > len(storeDown):
		err := errors.Join(transient...)
		if len(permanent) > 0 {
			// Text, not wrapped: a wrapped Permanent would make the whole
			// error permanent, and the endpoints that may still take the
			// event would never get it.
			err = fmt.Errorf("%w; refused by: %v", err, errors.Join(permanent...))
		}
		if hint > 0 {
			return warren.RetryAfter(hint, err)
		}
		return err
	case len(storeDown) > 0:
		// Only the store failed: no POST was tried and failed, so no
		// attempt is spent, however long the outage (endpoints that refused
		// the event refuse it again when it comes back).
		return warren.Unavailable(middleware.DefaultUnavailableDelay, errors.Join(storeDown...))
	case len(permanent) > 0:
		return warren.Permanent(errors.Join(permanent...))
	case busy:
		return warren.Defer(5*time.Second, "another worker is delivering this event")
	case wanted == 0:
		return warren.Skip("no endpoint wants event type " + m.Event.Type)
	case already == wanted:
		return warren.Duplicate("every endpoint already has this event")
	}
	return nil
}
