package cdc_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/internal/observertest"
)

// The Observer scenarios both relays pass (relay/internal/observertest):
// the CDC relay reports what the polling relay does, so that one adapter
// serves both, and survives an Observer that panics.
func TestObserverScenarios(t *testing.T) {
	observertest.Scenarios(t, func(t *testing.T) (*testenv.OutboxTable, observertest.Start) {
		e := newEnv(t)
		return e.ob, func(s observertest.Settings) {
			cfg := e.config()
			cfg.Exchange, cfg.Observer, cfg.MaxAttempts, cfg.PlaneProperties = s.Exchange, s.Observer, s.MaxAttempts, s.PlaneProperties
			if s.Logger != nil {
				cfg.Logger = s.Logger
			}
			cfg.StatsInterval = 50 * time.Millisecond
			e.start(cfg)
		}
	})
}
