package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/warrenmq/warren/outbox"
)

// statsQueryFloor is the least time a stats query is given. Readings
// never overlap (the next waits for this one), so a long query only
// delays the next reading.
const statsQueryFloor = 5 * time.Second

// ReportStats reads table's stats on db every interval, from now until
// ctx ends, and hands each reading to report. One query on the partial
// indexes per interval and relay, so it costs nothing that matters. A
// failed reading is logged at debug level and skipped.
func ReportStats(ctx context.Context, table *outbox.Table, db outbox.DB, interval time.Duration, report func(outbox.Stats), log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// The query may take up to an interval, but never less than
		// statsQueryFloor: a short interval on a busy database would
		// otherwise time out every reading and report none.
		qctx, cancel := context.WithTimeout(ctx, max(interval, statsQueryFloor))
		s, err := table.Stats(qctx, db)
		cancel()
		switch {
		case err == nil:
			report(s)
		case ctx.Err() == nil:
			log.Debug("outbox stats for metrics failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
