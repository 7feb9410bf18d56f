package cdc_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/relay/internal/observertest"
)

// The Observer scenario both relays pass (relay/internal/observertest):
// the CDC relay reports what the polling relay does, so that one adapter
// serves both.
func TestObserverScenarioSharedWithThePollingRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	observertest.Run(t, e.ob, e.observerStart)
}

// An Observer that panics costs its reports, not a crash between a
// confirm and its settle (relay/internal/observertest.RunPanicking).
func TestObserverPanicIsRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	observertest.RunPanicking(t, e.ob, e.observerStart)
}

// observerStart starts a relay as the shared Observer scenarios ask.
func (e *env) observerStart(s observertest.Settings) {
	cfg := e.config()
	cfg.Exchange, cfg.Observer, cfg.MaxAttempts = s.Exchange, s.Observer, s.MaxAttempts
	if s.Logger != nil {
		cfg.Logger = s.Logger
	}
	cfg.StatsInterval = 50 * time.Millisecond
	e.start(cfg)
}
