package console

import (
	"context"
	"net/http"
	"time"

	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
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
	}{Broker: amqpx.RedactURLs(s.cfg.AMQPURL), NoInventory: s.inventoryErr, Database: s.dbShown}
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
