package console

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warrenmq/warren/cmd/warren/internal/archivefile"
	"github.com/warrenmq/warren/dlqtool"
)

// archiveAndPurge deletes the plan's messages after writing them to a new
// file in the archive directory, returning the file's path and how many
// it deleted.
//
// dlqtool's Purge with an Archive keeps the data safe by its order: it
// holds every matching message unacknowledged (the broker still owns it)
// while writing it to the archive as JSON Lines (the export format, which
// `warren dlq import` reads back), syncs the archive, and only then
// deletes them; when writing or syncing fails, nothing is deleted. The
// archive here syncs the directory too, so that the file's name survives a
// crash as well as its content, before the first deletion.
func (s *Server) archiveAndPurge(ctx context.Context, q *dlqtool.Queue, p plan, progress func(dlqtool.Progress)) (path string, purged int, err error) {
	name := fmt.Sprintf("%s-purge-%s-%s.jsonl", safeFileName(q.Name()), time.Now().UTC().Format("20060102T150405Z"), randomString()[:6])
	path = filepath.Join(s.cfg.ArchiveDir, name)
	f, err := archivefile.Create(path) // never an archive already there
	if err != nil {
		return "", 0, fmt.Errorf("create the archive (nothing was purged): %w", err)
	}
	res, err := q.Purge(ctx, dlqtool.PurgeOptions{Filter: p.Filter, Limit: p.Count, Archive: f, Progress: progress})
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close the archive (its content was synced before the purge): %w", cerr)
	}
	if res.Done == 0 {
		// Nothing was deleted: every message it holds is still in the
		// queue. Kept, and named on the result page as "archived first",
		// it would invite a `warren dlq import` that doubles them.
		os.Remove(path)
		path = ""
	}
	return path, res.Done, err
}

// safeFileName keeps letters, digits, '.', '-' and '_' of a queue's name.
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}
