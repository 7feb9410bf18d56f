package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// Inventory lists the warren consumers on the broker with their queues'
// counts and rates. *inventory.Client implements it over RabbitMQ's
// management API; tests may pass their own.
type Inventory interface {
	Consumers(ctx context.Context) ([]inventory.Consumer, error)
}

// overview is the front page: every consumer's queues, and the outbox.
func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	data := struct {
		Broker       string
		Consumers    []inventory.Consumer
		ConsumersErr string
		NoInventory  string
		Outbox       *outbox.Stats
		OutboxTable  string
		OutboxOldest string
		Database     string
		OutboxErr    string
		Relays       []relayState
		// HeldBy: how many relays each queue holds back.
		HeldBy map[string]int
	}{Broker: amqpx.RedactURLs(s.cfg.AMQPURL), NoInventory: s.inventoryErr, Database: s.dbShown}
	data.Relays = readRelays(ctx, s.cfg.Relays)
	data.HeldBy = map[string]int{}
	for _, r := range data.Relays {
		if r.Err == "" && r.Health.HeldBack && r.Health.HeldBy != "" {
			data.HeldBy[r.Health.HeldBy]++
		}
	}
	if s.inventory != nil {
		cs, err := s.inventory.Consumers(ctx)
		data.Consumers = cs
		if err != nil {
			data.ConsumersErr = redact.Secrets(err.Error())
		}
	}
	if s.outbox != nil {
		data.OutboxTable = s.outbox.Name()
		st, err := s.outbox.Stats(ctx, s.db)
		if err != nil {
			data.OutboxErr = redact.Secrets(err.Error())
		} else {
			data.Outbox, data.OutboxOldest = &st, duration(st.OldestPendingAge)
		}
	}
	s.render(w, r, http.StatusOK, "overview", "Overview", data)
}

// relayState is one relay's /healthz as the overview shows it.
type relayState struct {
	Addr   string // password masked
	Health relay.Health
	Err    string
}

// readRelays reads every relay's /healthz at once, each within 3s: a relay
// that does not answer is shown as such, and never holds the page up.
func readRelays(ctx context.Context, addrs []string) []relayState {
	out := make([]relayState, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			out[i] = relayState{Addr: redact.URL(addr)}
			h, err := readRelay(ctx, addr)
			if err != nil {
				out[i].Err = redact.Secrets(err.Error())
				return
			}
			out[i].Health = h
		})
	}
	wg.Wait()
	return out
}

// relayClient reads the relays. It follows no redirect: a relay answers
// /healthz itself, and following one would let an address read, and show
// as a relay's state, whatever another address answers (the console's own
// pages, a metadata service).
var relayClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// readRelay reads one relay's /healthz. A relay answers 200, or 503 with
// the same body when it is not alive; any other answer is not a relay's.
func readRelay(ctx context.Context, addr string) (relay.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var h relay.Health
	u, err := url.JoinPath(addr, "healthz")
	if err != nil {
		return h, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return h, err
	}
	resp, err := relayClient.Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return h, fmt.Errorf("/healthz answered %s, not a relay's health", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return h, err
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields["alive"] == nil || json.Unmarshal(body, &h) != nil {
		return h, fmt.Errorf("/healthz answered %s with no relay's health in it", resp.Status)
	}
	return h, nil
}
