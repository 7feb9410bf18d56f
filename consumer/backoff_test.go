package consumer_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// A start that keeps failing (here, every session's consumer channel is
// refused) is retried after pauses that grow towards ReconnectMaxDelay,
// not every ~100ms: the redial in between does not reset them.
func TestFailingStartBacksOff(t *testing.T) {
	t.Parallel()
	var log *logLines
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.ReconnectMaxDelay = 5 * time.Second
		cfg.Channels = 1
		log = captureLog(t, cfg)
	})
	consumer.SetBeforeConsumeHook(c, func(int) error { return errors.New("injected: the consumer channel is refused") })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	retry := regexp.MustCompile(`msg="could not start consuming; retrying".* retry_in=([0-9.]+m?s)`)
	var waits []time.Duration
	testenv.WaitFor(t, 30*time.Second, "seven failed starts", func() bool {
		waits = waits[:0]
		for _, m := range retry.FindAllStringSubmatch(log.String(), -1) {
			d, err := time.ParseDuration(m[1])
			if err != nil {
				t.Fatal(err)
			}
			waits = append(waits, d)
		}
		return len(waits) >= 7
	})
	t.Logf("pauses: %v", waits)
	// Exponential from 100ms by 1.5 with ±50% jitter: the seventh is at
	// least 570ms; stuck at the first step it is at most 150ms.
	if last := waits[6]; last < 400*time.Millisecond {
		t.Errorf("the seventh pause after a failed start is %v: the pauses do not grow (%v)", last, waits)
	}
}
