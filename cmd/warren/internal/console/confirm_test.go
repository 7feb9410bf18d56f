package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

var (
	actionRE      = regexp.MustCompile(`id="confirm-form" method="post" action="([^"]+)"`)
	fingerprintRE = regexp.MustCompile(`name="fingerprint" value="([^"]*)"`)
	countedIDsRE  = regexp.MustCompile(`<li class="counted-id">([^<]*)</li>`)
)

// takeAway removes the messages with these event ids from the DLQ, as
// another operator or tool would between a dry run and its confirmation.
func (f *fixture) takeAway(ids ...string) {
	f.t.Helper()
	q, err := dlqtool.Open(context.Background(), f.conn, f.top.DLQ)
	if err != nil {
		f.t.Fatal(err)
	}
	if res, err := q.Purge(context.Background(), dlqtool.PurgeOptions{Filter: dlqtool.Filter{EventIDs: ids}}); err != nil || res.Done != len(ids) {
		f.t.Fatalf("take away %v: %d, %v", ids, res.Done, err)
	}
}

// A confirmed replay or purge acts on exactly the messages its dry run
// counted. Between the two, two of them leave the queue and three more of
// the same failure arrive: the action takes the three counted ones still
// there, reports the two gone, and leaves the three late ones in place
// (and says so), though they match the group and the count would allow
// them.
func TestConfirmedActionTakesOnlyWhatTheDryRunCounted(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"replay", "purge", "export"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := newFixture(t, console.Config{ArchiveDir: dir})
			f.deadLetters("evt", 5, "timeout calling hook for item %d")
			csrf, _, body := f.groupsPage()
			path := "/dlq/" + f.top.Consumer + "/" + op
			dry := f.post(path, url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
			if got := match(t, countRE, dry.body); got != "5" {
				t.Fatalf("the dry run counted %s, want 5", got)
			}
			if !strings.Contains(dry.body, "exactly the 5 messages") {
				t.Errorf("the confirm page does not say it acts on exactly what it counted:\n%s", dry.body)
			}

			f.takeAway("evt-1", "evt-3")
			f.deadLetters("late", 3, "timeout calling hook for item 9%d")
			confirm := url.Values{"csrf": {csrf}, "plan": {match(t, planRE, dry.body)}}
			var res response
			if op != "export" {
				res = f.post(path, confirm)
			}

			var got []string
			switch op {
			case "export":
				// Short of what was confirmed: the download is cut off
				// (see TestExportShortOfTheConfirmedCountFailsTheDownload),
				// after the counted messages still there.
				body, cut := f.postDownload(path, confirm)
				if !cut {
					t.Errorf("an export short of its confirmed count ended cleanly")
				}
				msgs, err := dlqtool.ReadMessages(strings.NewReader(body))
				if err != nil {
					t.Fatalf("export: %v\n%s", err, body)
				}
				for _, m := range msgs {
					got = append(got, m.EventID)
				}
			case "replay":
				if !strings.Contains(res.body, `id="result-done">3<`) || !strings.Contains(res.body, `id="result-gone"`) || !strings.Contains(res.body, `id="result-unlisted" class="note">3 `) {
					t.Errorf("result page:\n%s", res.body)
				}
				for _, d := range testenv.Drain(t, f.conn, f.top.Consumer) {
					got = append(got, d.MessageId)
				}
			case "purge":
				if !strings.Contains(res.body, `id="result-done">3<`) || !strings.Contains(res.body, `id="result-unlisted" class="note">3 `) {
					t.Errorf("result page:\n%s", res.body)
				}
				for _, m := range archived(t, dir) {
					got = append(got, m.EventID)
				}
			}
			if want := []string{"evt-0", "evt-2", "evt-4"}; !slices.Equal(got, want) {
				t.Errorf("%s took %v, want exactly the counted ones still there, %v", op, got, want)
			}
			want := 6 // the 3 counted ones for export, which leaves them
			if op != "export" {
				want = 3
			}
			if n := f.depth(f.top.DLQ); n != want {
				t.Errorf("the DLQ holds %d, want %d", n, want)
			}
			left, err := dlqtool.Open(context.Background(), f.conn, f.top.DLQ)
			if err != nil {
				t.Fatal(err)
			}
			late, err := left.Peek(context.Background(), dlqtool.PeekOptions{Filter: dlqtool.Filter{TypePrefixes: []string{"workitem."}, ErrorContains: "item 9"}})
			if err != nil || len(late) != 3 {
				t.Errorf("the late messages left in the DLQ: %d (%v), want all 3", len(late), err)
			}
		})
	}
}

// "Redrive every dead row" redrives exactly the rows its dry run counted:
// one of them redriven meanwhile by someone else is reported gone, and a
// row that died after the dry run stays dead, though "every" and the
// count would take it.
func TestConfirmedRedriveTakesOnlyTheRowsCounted(t *testing.T) {
	t.Parallel()
	ob := testenv.NewOutboxTable(t)
	ob.PublishN("ev", 5)
	ob.Exec(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(), last_error = 'no route' WHERE event_id IN ('ev-0', 'ev-1', 'ev-2')`)
	f := newFixture(t, console.Config{DatabaseURL: testenv.DatabaseURL(t), Table: ob.Table.Name()})

	page := f.get("/outbox")
	dry := f.post("/outbox/redrive", url.Values{"csrf": {match(t, csrfRE, page.body)}, "scope": {"all"}})
	if got := match(t, countRE, dry.body); got != "3" {
		t.Fatalf("dry run counted %s, want 3", got)
	}
	ob.Exec(`UPDATE {table} SET state = 'pending', attempts = 0, finished_at = NULL WHERE event_id = 'ev-0'`)
	ob.Exec(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(), last_error = 'no route' WHERE event_id = 'ev-4'`)
	res := f.post("/outbox/redrive", url.Values{"csrf": {match(t, csrfRE, dry.body)}, "plan": {match(t, planRE, dry.body)}})
	if res.status != http.StatusOK || !strings.Contains(res.body, `id="result-done">2<`) || !strings.Contains(res.body, `id="result-gone"`) {
		t.Fatalf("result:\n%s", res.body)
	}
	if n := ob.Count("state = 'dead' AND event_id = 'ev-4'"); n != 1 {
		t.Errorf("the row that died after the dry run was redriven")
	}
	if n := ob.Count("state = 'dead'"); n != 1 {
		t.Errorf("%d rows dead, want only ev-4", n)
	}
}

// On a quorum DLQ every read hands the messages back with
// x-delivery-count one higher; the confirmed action still takes every
// message its dry run counted.
func TestConfirmedReplayOnAQuorumDLQTakesWhatTheDryRunCounted(t *testing.T) {
	t.Parallel()
	f := newFixtureOfType(t, console.Config{}, "quorum")
	f.deadLetters("evt", 5, "timeout calling hook for item %d")
	csrf, _, body := f.groupsPage()
	planned, res := f.act("replay", url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
	if planned != "5" {
		t.Fatalf("dry run planned %s, want 5", planned)
	}
	if !strings.Contains(res.body, `id="result-done">5<`) {
		t.Errorf("confirmed replay of 5 on a quorum DLQ did not replay them:\n%s", res.body)
	}
	if n := f.depth(f.top.DLQ); n != 0 {
		t.Errorf("DLQ still holds %d", n)
	}
}

// A message page's actions act on that message and no other: a
// producer's padded event id " evt-1" next to "evt-1" (ids are not
// trimmed, and the page's form names the message by its fingerprint).
func TestMessagePageActsOnExactlyThatMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{ArchiveDir: t.TempDir()})
	plain := f.top.Message(testenv.Dead{ID: "evt-1", Type: "t", Class: dlq.ClassExhausted, Attempts: 1, Err: "boom"})
	padded := f.top.Message(testenv.Dead{ID: " evt-1", Type: "t", Class: dlq.ClassExhausted, Attempts: 1, Err: "boom"})
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{plain, padded})

	page := f.get("/dlq/" + f.top.Consumer + "/message?id=" + url.QueryEscape(" evt-1"))
	if page.status != http.StatusOK || strings.Count(page.body, `<section class="message"`) != 1 {
		t.Fatalf("message page of \" evt-1\": %d", page.status)
	}
	form := url.Values{"csrf": {match(t, csrfRE, page.body)}, "scope": {"message"}, "fingerprint": {match(t, fingerprintRE, page.body)}}
	dry := f.post("/dlq/"+f.top.Consumer+"/purge", form)
	if got := match(t, countRE, dry.body); got != "1" {
		t.Fatalf("dry run counted %s, want 1", got)
	}
	if got := match(t, countedIDsRE, dry.body); got != " evt-1" {
		t.Errorf("the confirmation lists %q, want the id \" evt-1\"", got)
	}
	res := f.post("/dlq/"+f.top.Consumer+"/purge", url.Values{"csrf": {match(t, csrfRE, dry.body)}, "plan": {match(t, planRE, dry.body)}})
	if !strings.Contains(res.body, `id="result-done">1<`) {
		t.Errorf("purge did not purge 1:\n%s", res.body)
	}
	left, err := dlqtool.Open(t.Context(), f.conn, f.top.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := left.Peek(t.Context(), dlqtool.PeekOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].EventID != "evt-1" {
		var ids []string
		for _, m := range msgs {
			ids = append(ids, m.EventID)
		}
		t.Errorf("purging the message \" evt-1\" from its page: want \"evt-1\" left, left %q", ids)
	}
}

// The confirmation page lists the event ids its dry run counted, a
// bounded number of them, and says how many more.
func TestConfirmationListsTheCountedIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 30, "timeout %d")
	csrf, _, body := f.groupsPage()
	dry := f.post("/dlq/"+f.top.Consumer+"/export", url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
	ids := countedIDsRE.FindAllStringSubmatch(dry.body, -1)
	if len(ids) != 20 || ids[0][1] != "evt-0" || ids[19][1] != "evt-19" {
		t.Errorf("the confirmation lists %d ids (%v), want evt-0 … evt-19", len(ids), ids)
	}
	if !strings.Contains(dry.body, "and 10 more") {
		t.Errorf("the confirmation does not say \"and 10 more\":\n%s", dry.body)
	}
}

// A queue name with '?' (RabbitMQ allows any UTF-8): the confirmation
// form must post to the queue's own action, however its name escapes.
func TestConfirmationPostsToTheQueueWhateverItsName(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	for _, suffix := range []string{"?x", "#x", "/x", "%41x"} {
		name := testenv.Name(t, "c") + suffix
		dlqName := dlq.QueueName(name)
		testenv.CleanupQueues(t, dlqName)
		if _, err := f.ch.QueueDeclare(dlqName, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		m := f.top.Message(testenv.Dead{ID: "q-1", Type: "t", Class: dlq.ClassExhausted, Attempts: 1, Err: "boom"})
		testenv.PublishInOrder(t, f.conn, dlqName, []amqp.Publishing{m})
		g := f.get("/dlq/" + url.PathEscape(dlqName))
		if g.status != http.StatusOK {
			t.Fatalf("groups: %d %s", g.status, g.body)
		}
		csrf := match(t, csrfRE, g.body)
		dry := f.post("/dlq/"+url.PathEscape(dlqName)+"/export", url.Values{"csrf": {csrf}, "group": {match(t, groupRE, g.body)}, "scope": {"group"}})
		if dry.status != http.StatusOK {
			t.Fatalf("dry run: %d %s", dry.status, dry.body)
		}
		action := match(t, actionRE, dry.body)
		u, err := url.Parse(action)
		if err != nil {
			t.Fatal(err)
		}
		// What a browser does with the form's action.
		res := f.post(u.String(), url.Values{"csrf": {csrf}, "plan": {match(t, planRE, dry.body)}})
		if res.status != http.StatusOK || !strings.Contains(res.body, "q-1") {
			t.Errorf("%s: confirm posted to %q (path %q): %d\n%s", dlqName, action, u.Path, res.status, res.body)
		}
	}
}

// An export whose counted messages left meanwhile must not look like a
// complete download: the response is cut off, so the browser shows the
// download failed, instead of a 200 with fewer lines than confirmed.
func TestExportShortOfTheConfirmedCountFailsTheDownload(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 3, "timeout %d")
	csrf, _, body := f.groupsPage()
	path := "/dlq/" + f.top.Consumer + "/export"
	dry := f.post(path, url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
	f.takeAway("evt-0", "evt-1")
	body, cut := f.postDownload(path, url.Values{"csrf": {csrf}, "plan": {match(t, planRE, dry.body)}})
	if lines := strings.Count(body, "\n"); !cut && lines != 3 {
		t.Errorf("export of 3 confirmed messages answered 200 with %d lines and no word of the 2 missing", lines)
	}
}

// postDownload posts form to path and returns what it received, and
// whether the response was cut off (the connection closed before the
// body's end) rather than ending cleanly with a 200.
func (f *fixture) postDownload(path string, form url.Values) (body string, cut bool) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := f.c.Do(req)
	if err != nil {
		return "", true // cut off before the headers
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err != nil || resp.StatusCode != http.StatusOK
}

// A result is kept for a day; the lists its plan held to act on (every
// fingerprint, event id or row id counted) are dropped once its action
// has ended.
func TestEndedActionsResultKeepsNoLists(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 5, "timeout %d")
	csrf, _, body := f.groupsPage()
	_, res := f.act("replay", url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
	if !strings.Contains(res.body, `id="result-done">5<`) {
		t.Fatalf("replay:\n%s", res.body)
	}
	if n := console.ResultLists(f.console, strings.TrimPrefix(res.path, "/results/")); n != 0 {
		t.Errorf("the ended replay's result still holds %d listed fingerprints and ids", n)
	}
}

// nested is a header value nested depth tables deep: amqp091-go refuses
// to read one deeper than 32, and closes the connection it came on.
func nested(depth int) any {
	var v any = "leaf"
	for range depth {
		v = amqp.Table{"n": v}
	}
	return v
}

// A confirmed action runs on a connection of its own: opening the page of
// another DLQ, whose unreadable message closes the connection the pages
// share, does not cut the action short.
func TestAnActionIsNotStoppedByAnotherQueuesPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 3000, "timeout %d")
	b := testenv.DeclareDeadLetterTopology(t, f.ch)
	bad := b.Message(testenv.Dead{ID: "poison", Type: "t", Class: dlq.ClassExhausted, Attempts: 1, Err: "boom"})
	bad.Headers["deep"] = nested(40)
	testenv.PublishInOrder(t, f.conn, b.DLQ, []amqp.Publishing{bad})

	csrf, _, body := f.groupsPage()
	path := "/dlq/" + f.top.Consumer + "/replay"
	dry := f.post(path, url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
	f.runningOK = true
	started := f.post(path, url.Values{"csrf": {csrf}, "plan": {match(t, planRE, dry.body)}})
	f.get("/dlq/" + b.Consumer) // someone opens the other queue's page
	f.runningOK = false
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+started.path, nil)
	res := f.do(req)
	// Nothing is lost: what was not replayed goes back to the DLQ.
	testenv.WaitFor(t, 30*time.Second, "every message back in the DLQ or replayed", func() bool {
		return f.depth(f.top.DLQ)+f.depth(f.top.Consumer) == 3000
	})
	if !strings.Contains(res.body, `id="result-done">3000<`) {
		t.Errorf("the replay on %s did not finish: %s", f.top.DLQ, res.body)
	}
}
