package cdc_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/internal/observertest"
)

// The Observer scenario both relays pass (relay/internal/observertest):
// the CDC relay reports what the polling relay does, so that one adapter
// serves both.
func TestObserverScenarioSharedWithThePollingRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	observertest.Run(t, e.ob, func(exchange string, obs relay.Observer, maxAttempts int) {
		cfg := e.config()
		cfg.Exchange, cfg.Observer, cfg.MaxAttempts = exchange, obs, maxAttempts
		cfg.StatsInterval = 50 * time.Millisecond
		e.start(cfg)
	})
}
