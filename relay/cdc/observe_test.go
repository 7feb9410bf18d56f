package cdc_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/internal/relaytest"
)

// The scenarios both relays pass (relay/internal/relaytest):
// the CDC relay reports what the polling relay does, so that one adapter
// serves both, and survives an Observer that panics.
func TestScenariosBothRelaysPass(t *testing.T) {
	relaytest.Scenarios(t, func(t *testing.T) (*testenv.OutboxTable, relaytest.Start) {
		e := newEnv(t)
		return e.ob, func(s relaytest.Settings) {
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
