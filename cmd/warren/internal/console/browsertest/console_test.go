package browsertest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	browser "github.com/warrenmq/warren/cmd/warren/internal/console/browsertest"
	"github.com/warrenmq/warren/cmd/warren/internal/console/consoletest"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/testenv"
)

// screenshotDir is where the browser test saves a picture of each page:
// the absolute directory WARREN_CONSOLE_SCREENSHOTS names (make
// screenshots: docs/console), else a temporary directory, so a test run
// never changes the checkout.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("WARREN_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if !filepath.IsAbs(dir) {
		t.Fatalf("WARREN_CONSOLE_SCREENSHOTS=%s: want an absolute path (a test runs in its package's directory)", dir)
	}
	return dir
}

// text reads an element's text, waiting until the page has it.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("read %s on %s: %v", sel, location(ctx), err)
	}
	return strings.TrimSpace(s)
}

func location(ctx context.Context) string {
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	return loc
}

func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s (at %s): %v", what, location(ctx), err)
	}
}

// An operator in a real browser logs in with the token, looks at every
// page, replays the largest group of dead letters through the confirm
// page, and sees the count drop; the origin queue gets exactly that
// group. A form whose CSRF field was removed is refused and changes
// nothing. Each page is saved as a screenshot on the way.
func TestBrowserReplayGroup(t *testing.T) {
	t.Parallel()
	testenv.RequireManagement(t)
	const token = "browser-test-token"
	ob := testenv.NewOutboxTable(t)
	ob.PublishN("ev", 8)
	ob.Exec(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(),
		last_error = 'publish ' || event_id || ': broker nacked after 5s' WHERE event_id IN ('ev-0', 'ev-1', 'ev-2')`)
	f := consoletest.New(t, console.Config{Token: token, ArchiveDir: t.TempDir(), DatabaseURL: testenv.DatabaseURL(t), Table: ob.Table.Name()}, "classic")
	f.DeadLetters("evt", 12, "POST https://hooks.example.com/w/%d: context deadline exceeded (Client.Timeout exceeded after 10s)")
	var other []amqp.Publishing
	for i := range 3 {
		other = append(other, f.Top.Message(testenv.Dead{ID: fmt.Sprintf("gone-%d", i), Type: "issue.deleted", Class: dlq.ClassPermanent, Attempts: 1,
			Err: fmt.Sprintf("webhook answered HTTP 410 for project %d", 100+i)}))
	}
	other = append(other, f.Top.Message(testenv.Dead{ID: "bad-0", Type: "issue.created", Class: dlq.ClassUndecodable, Attempts: 1,
		Err: "decode event: invalid character 'x' looking for beginning of value", Body: []byte("x\x00\x01 not json")}))
	testenv.PublishInOrder(t, f.Conn, f.Top.DLQ, other)
	shots := screenshotDir(t)
	ctx := browser.New(t, 3*time.Minute)

	// Every page needs the token: the first one is the login form.
	do(t, ctx, "log in",
		chromedp.Navigate(f.Srv.URL+"/"),
		chromedp.SetValue(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login-button")),
		chromedp.WaitVisible(chromedp.ID("overview")),
	)
	// The management API shows a new queue's depth within its refresh
	// interval; the page reloads itself until then.
	overviewDLQ := fmt.Sprintf(`#consumer-%s .dlq-depth`, f.Top.Consumer)
	testenv.WaitFor(t, time.Minute, "the overview to show the DLQ's 16 messages", func() bool {
		do(t, ctx, "reload the overview", chromedp.Navigate(f.Srv.URL+"/?refresh=off"), chromedp.WaitVisible(chromedp.ID("consumers")))
		s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, overviewDLQ)))
		return strings.TrimSpace(s) == "16"
	})
	browser.Screenshot(t, ctx, filepath.Join(shots, "overview.png"))

	// Dead letters, grouped by signature: 12 timeouts are one row.
	do(t, ctx, "open the DLQ", chromedp.Click(chromedp.CSS(overviewDLQ+" a")), chromedp.WaitVisible(chromedp.ID("groups")))
	counts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.group .group-count")].map(e => e.textContent.trim())`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(counts, []string{"12", "3", "1"}) {
		t.Fatalf("group counts %v, want [12 3 1]", counts)
	}
	browser.Screenshot(t, ctx, filepath.Join(shots, "dead-letters.png"))
	groupsURL := location(ctx)

	// A group opens to its messages, a message to its headers and body.
	do(t, ctx, "open the largest group", chromedp.Click(chromedp.CSS("tr.group .group-link")), chromedp.WaitVisible(chromedp.ID("messages")))
	if n := text(t, ctx, "#group-count"); n != "12" {
		t.Fatalf("group page counts %s, want 12", n)
	}
	browser.Screenshot(t, ctx, filepath.Join(shots, "group.png"))
	do(t, ctx, "open a message", chromedp.Click(chromedp.CSS("a.message-link")), chromedp.WaitVisible(chromedp.CSS("section.message")))
	if id := text(t, ctx, ".event-id"); !strings.HasPrefix(id, "evt-") {
		t.Fatalf("message page shows event %q, want one of the group", id)
	}
	browser.Screenshot(t, ctx, filepath.Join(shots, "message.png"))

	// Replay the group: the confirm page says how many, the result how
	// many went.
	do(t, ctx, "replay the group",
		chromedp.Navigate(groupsURL),
		chromedp.Click(chromedp.CSS("tr.group button.replay-group")),
		chromedp.WaitVisible(chromedp.ID("confirm-button")),
	)
	if n := text(t, ctx, "#confirm-count"); n != "12" {
		t.Fatalf("confirm page says %s messages, want 12", n)
	}
	browser.Screenshot(t, ctx, filepath.Join(shots, "confirm.png"))
	// The result page reloads itself while the replay runs, until it
	// says done.
	do(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm-button")), chromedp.WaitVisible(chromedp.CSS(`#result[data-state="done"]`)))
	if done, failed := text(t, ctx, "#result-done"), text(t, ctx, "#result-failed"); done != "12" || failed != "0" {
		t.Fatalf("result: %s replayed, %s failed; want 12 and 0", done, failed)
	}
	browser.Screenshot(t, ctx, filepath.Join(shots, "result.png"))
	if n := f.Depth(f.Top.DLQ); n != 4 {
		t.Fatalf("the DLQ holds %d after the replay, want 4", n)
	}
	var replayed []string
	for _, d := range testenv.Drain(t, f.Conn, f.Top.Consumer) {
		replayed = append(replayed, d.MessageId)
	}
	slices.Sort(replayed)
	var want []string
	for i := range 12 {
		want = append(want, fmt.Sprintf("evt-%d", i))
	}
	slices.Sort(want)
	if !slices.Equal(replayed, want) {
		t.Fatalf("the origin queue got %v, want exactly %v", replayed, want)
	}
	do(t, ctx, "back to the DLQ", chromedp.Navigate(groupsURL), chromedp.WaitVisible(chromedp.ID("groups")))
	counts, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.group .group-count")].map(e => e.textContent.trim())`))
	if err != nil || !slices.Equal(counts, []string{"3", "1"}) {
		t.Fatalf("after the replay the groups count %v (%v), want [3 1]", counts, err)
	}

	// A form stripped of its CSRF token is refused, and nothing moves.
	do(t, ctx, "replay without the CSRF token",
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())`),
		chromedp.Click(chromedp.CSS("tr.group button.replay-group")),
		chromedp.WaitVisible(chromedp.ID("error-text")),
	)
	if msg := text(t, ctx, "#error-text"); !strings.Contains(strings.ToLower(msg), "csrf") {
		t.Fatalf("refusal says %q, want a word about the CSRF token", msg)
	}
	if n := f.Depth(f.Top.DLQ); n != 4 {
		t.Fatalf("the DLQ holds %d after a refused replay, want 4", n)
	}
	if n := f.Depth(f.Top.Consumer); n != 0 {
		t.Fatalf("a refused replay sent %d messages", n)
	}

	do(t, ctx, "open the outbox", chromedp.Navigate(f.Srv.URL+"/outbox"), chromedp.WaitVisible(chromedp.ID("outbox")))
	if n := text(t, ctx, "#outbox-dead"); n != "3" {
		t.Fatalf("outbox page shows %s dead rows, want 3", n)
	}
	browser.Screenshot(t, ctx, filepath.Join(shots, "outbox.png"))
}
