package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
)

// A DLQ holding messages whose headers amqp091-go refuses made the
// console's pages fail. Its pages read such a queue now: the groups, the
// message page showing dlq.HeaderUnreadable, an export and a purge.
func TestDLQPagesReadUnreadableHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{ArchiveDir: t.TempDir()})
	var ids []string
	for id := range f.top.ExpireUnreadable(t, f.conn) {
		ids = append(ids, id)
	}

	csrf, counts, _ := f.groupsPage()
	if len(counts) == 0 {
		t.Fatal("the DLQ page shows no group")
	}
	for _, id := range ids {
		r := f.get("/dlq/" + f.top.Consumer + "/message?id=" + id)
		if r.status != http.StatusOK || !strings.Contains(r.body, dlq.HeaderUnreadable) {
			t.Errorf("message page of %s: %d\n%s", id, r.status, r.body)
		}
	}
	planned, r := f.act("export", url.Values{"csrf": {csrf}, "id": ids, "scope": {"selected"}})
	exported, err := dlqtool.ReadMessages(strings.NewReader(r.body))
	if planned != strconv.Itoa(len(ids)) || err != nil || len(exported) != len(ids) {
		t.Fatalf("export: planned %s, %d messages (%v)\n%s", planned, len(exported), err, r.body)
	}
	if _, r := f.act("purge", url.Values{"csrf": {csrf}, "id": ids, "scope": {"selected"}}); !strings.Contains(r.body, fmt.Sprintf(`id="result-done">%d<`, len(ids))) {
		t.Fatalf("purge result:\n%s", r.body)
	}
	if n := f.depth(f.top.DLQ); n != 0 {
		t.Errorf("DLQ holds %d after the purge, want 0", n)
	}
}
