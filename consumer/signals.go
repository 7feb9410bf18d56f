package consumer

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// RunUntilSignal runs the consumer until ctx ends or the process receives
// SIGINT, SIGTERM or SIGQUIT, then drains as Run does. A signal that arrives
// while draining cuts the grace period short: running handlers are
// cancelled at once and their messages requeued.
func (c *BaseConsumer) RunUntilSignal(ctx context.Context) error {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT)
	defer signal.Stop(signals)

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	runReturned := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		for {
			select {
			case sig := <-signals:
				if ctx.Err() == nil {
					c.log.Info("signal received; draining", "signal", sig.String(), "grace", c.cfg.ShutdownGrace)
					stop()
					continue
				}
				c.log.Warn("signal received while draining; stopping now", "signal", sig.String())
				c.ForceStop()
			case <-runReturned:
				return
			}
		}
	}()
	err := c.Run(ctx)
	close(runReturned)
	<-watcherDone
	return err
}
