package console_test

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	"github.com/warrenmq/warren/cmd/warren/internal/console/consoletest"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

// fixture is a console over a fresh dead-letter topology.
type fixture struct {
	t       *testing.T
	fx      *consoletest.Fixture
	console *console.Server
	srv     *httptest.Server
	// runningOK keeps do from waiting out a running action's result page.
	runningOK bool
	c         *http.Client
	conn      *amqp.Connection
	ch        *amqp.Channel
	top       testenv.DeadLetterTopology
}

func newFixture(t *testing.T, cfg console.Config) *fixture {
	t.Helper()
	return newFixtureOfType(t, cfg, "classic")
}

// newFixtureOfType is newFixture over a DLQ of queueType, as a consumer
// with that QueueType declares it (consumer/declare.go gives the DLQ the
// consumer's queue type).
func newFixtureOfType(t *testing.T, cfg console.Config, queueType string) *fixture {
	t.Helper()
	fx := consoletest.New(t, cfg, queueType)
	jar, _ := cookiejar.New(nil)
	return &fixture{t: t, fx: fx, console: fx.Console, srv: fx.Srv, c: &http.Client{Jar: jar}, conn: fx.Conn, ch: fx.Ch, top: fx.Top}
}

// deadLetters puts n dead letters in the DLQ that share one failure
// signature (consoletest.Fixture.DeadLetters).
func (f *fixture) deadLetters(prefix string, n int, errFormat string) {
	f.t.Helper()
	f.fx.DeadLetters(prefix, n, errFormat)
}

func (f *fixture) depth(queue string) int {
	f.t.Helper()
	return f.fx.Depth(queue)
}

type response struct {
	status int
	body   string
	header http.Header
	path   string // after redirects
}

// do sends req, following redirects; a confirmed action's result page is
// read again until the action has ended (unless runningOK).
func (f *fixture) do(req *http.Request) response {
	f.t.Helper()
	r := f.send(req)
	if f.runningOK || !strings.HasPrefix(r.path, "/results/") {
		return r
	}
	testenv.WaitFor(f.t, 2*time.Minute, "the action to end", func() bool {
		if !strings.Contains(r.body, `data-state="running"`) {
			return true
		}
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+r.path, nil)
		r = f.send(req)
		return false
	})
	return r
}

func (f *fixture) send(req *http.Request) response {
	f.t.Helper()
	resp, err := f.c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return response{resp.StatusCode, string(b), resp.Header, resp.Request.URL.Path}
}

func (f *fixture) get(path string) response {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	return f.do(req)
}

func (f *fixture) post(path string, form url.Values) response {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return f.do(req)
}

var (
	csrfRE   = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	planRE   = regexp.MustCompile(`name="plan" value="([^"]+)"`)
	countRE  = regexp.MustCompile(`id="confirm-count">(\d+)<`)
	groupsRE = regexp.MustCompile(`(?s)<tr class="group" id="group-([0-9a-f]+)".*?group-count">(\d+)<`)
	groupRE  = regexp.MustCompile(`name="group" value="([^"]+)"`)
)

// match returns the first submatch of re in an HTML page, unescaped as a
// browser would read it.
func match(t *testing.T, re *regexp.Regexp, body string) string {
	t.Helper()
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("%v not found in:\n%s", re, body)
	}
	return html.UnescapeString(m[1])
}

// groupsPage gets the DLQ's page and returns its CSRF token and each
// group's count by id, in page order.
func (f *fixture) groupsPage() (csrf string, counts []string, body string) {
	f.t.Helper()
	r := f.get("/dlq/" + f.top.Consumer)
	if r.status != http.StatusOK {
		f.t.Fatalf("GET /dlq: %d\n%s", r.status, r.body)
	}
	for _, m := range groupsRE.FindAllStringSubmatch(r.body, -1) {
		counts = append(counts, m[2])
	}
	return match(f.t, csrfRE, r.body), counts, r.body
}

// act runs an action's two steps, dry run then confirmation, and returns
// the count the confirmation page gave and the final response.
func (f *fixture) act(op string, form url.Values) (planned string, final response) {
	f.t.Helper()
	path := "/dlq/" + f.top.Consumer + "/" + op
	dry := f.post(path, form)
	if dry.status != http.StatusOK {
		f.t.Fatalf("%s dry run: %d\n%s", op, dry.status, dry.body)
	}
	planned = match(f.t, countRE, dry.body)
	final = f.post(path, url.Values{"csrf": {match(f.t, csrfRE, dry.body)}, "plan": {match(f.t, planRE, dry.body)}})
	return planned, final
}

func TestGroupsDeadLettersBySignature(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 12, "POST https://hooks.example/w/%d: context deadline exceeded after 30s (order-%d)")
	f.deadLetters("bad", 3, "HTTP 404 from hook for item %d")

	_, counts, body := f.groupsPage()
	if fmt.Sprint(counts) != "[12 3]" {
		t.Fatalf("group counts %v, want [12 3]\n%s", counts, body)
	}
	for _, want := range []string{`id="dlq-depth">15<`, "workitem.updated", "exhausted: POST &lt;url&gt;: context deadline exceeded after &lt;duration&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if n := f.depth(f.top.DLQ); n != 15 {
		t.Errorf("DLQ holds %d after the page read it, want 15", n)
	}

	// The group opens to its 12 messages.
	id := groupsRE.FindStringSubmatch(body)[1]
	g := f.get("/dlq/" + f.top.Consumer + "/group/" + id)
	if g.status != http.StatusOK || strings.Count(g.body, `<tr class="message"`) != 12 || !strings.Contains(g.body, `id="group-count">12<`) {
		t.Errorf("group page: %d, %d messages\n%s", g.status, strings.Count(g.body, `<tr class="message"`), g.body)
	}
}

func TestReplayGroupMovesExactlyItsMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 12, "timeout calling hook for item %d")
	f.deadLetters("other", 2, "permanent failure: bad payload in %d")

	csrf, _, body := f.groupsPage()
	path := "/dlq/" + f.top.Consumer + "/replay"
	dry := f.post(path, url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}}) // the largest group is first
	if got := match(t, countRE, dry.body); got != "12" {
		t.Errorf("the dry run planned %s, want 12", got)
	}
	// Two more of the same failure arrive between the dry run and the
	// confirmation: the confirmation acts on the 12 it showed, no more.
	f.deadLetters("late", 2, "timeout calling hook for item 9%d")
	res := f.post(path, url.Values{"csrf": {csrf}, "plan": {match(t, planRE, dry.body)}})
	if res.status != http.StatusOK || !strings.Contains(res.body, `id="result-done">12<`) || !strings.Contains(res.body, `id="result-failed">0<`) {
		t.Fatalf("result: %d\n%s", res.status, res.body)
	}
	if n := f.depth(f.top.DLQ); n != 4 {
		t.Errorf("DLQ holds %d, want the 2 of the other group and the 2 late ones", n)
	}
	replayed := testenv.Drain(t, f.conn, f.top.Consumer)
	if len(replayed) != 12 {
		t.Fatalf("origin queue got %d messages, want 12", len(replayed))
	}
	for _, d := range replayed {
		if !strings.HasPrefix(d.MessageId, "evt-") {
			t.Errorf("replayed %s, which the dry run did not count", d.MessageId)
		}
	}
}

func TestActionsRefuseWithoutCSRFToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 3, "timeout %d")
	csrf, _, body := f.groupsPage()
	group := match(t, groupRE, body)
	path := "/dlq/" + f.top.Consumer + "/replay"

	for name, form := range map[string]url.Values{
		"no token":    {"group": {group}, "scope": {"group"}},
		"wrong token": {"group": {group}, "scope": {"group"}, "csrf": {csrf + "x"}},
	} {
		if r := f.post(path, form); r.status != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", name, r.status)
		}
	}
	// A valid token from a cross-site page is refused too.
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(url.Values{"group": {group}, "scope": {"group"}, "csrf": {csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if r := f.do(req); r.status != http.StatusForbidden {
		t.Errorf("cross-site: status %d, want 403", r.status)
	}
	// So is a confirmation without one.
	dry := f.post(path, url.Values{"group": {group}, "scope": {"group"}, "csrf": {csrf}})
	if r := f.post(path, url.Values{"plan": {match(t, planRE, dry.body)}}); r.status != http.StatusForbidden {
		t.Errorf("confirmation without token: status %d, want 403", r.status)
	}
	if n := f.depth(f.top.DLQ); n != 3 {
		t.Errorf("DLQ holds %d, want all 3", n)
	}
	if n := f.depth(f.top.Consumer); n != 0 {
		t.Errorf("origin queue got %d messages", n)
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{ReadOnly: true, ArchiveDir: t.TempDir()})
	f.deadLetters("evt", 2, "timeout %d")
	body := f.get("/dlq/" + f.top.Consumer).body
	id := match(t, groupsRE, body)
	g := f.get("/dlq/" + f.top.Consumer + "/group/" + id).body
	for _, page := range []string{body, g} {
		if strings.Contains(page, "<button") {
			t.Errorf("a read-only page shows action buttons:\n%s", page)
		}
	}
	csrf := match(t, csrfRE, g) // a valid token: the refusal must be read-only's
	for _, op := range []string{"replay", "purge", "export"} {
		r := f.post("/dlq/"+f.top.Consumer+"/"+op, url.Values{"csrf": {csrf}, "id": {"evt-0"}, "scope": {"message"}})
		if r.status != http.StatusForbidden || !strings.Contains(r.body, "read-only") {
			t.Errorf("%s: status %d, want 403 for read-only: %s", op, r.status, r.body)
		}
	}
	if n := f.depth(f.top.DLQ); n != 2 {
		t.Errorf("DLQ holds %d, want 2", n)
	}
}

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cret-console-token"
	f := newFixture(t, console.Config{Token: token})
	f.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	if r := f.get("/dlq/" + f.top.Consumer); r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/login") {
		t.Errorf("page without token: %d → %q, want the login form", r.status, r.header.Get("Location"))
	}
	if r := f.post("/dlq/"+f.top.Consumer+"/replay", url.Values{"id": {"x"}}); r.status != http.StatusUnauthorized {
		t.Errorf("POST without token: %d, want 401", r.status)
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/dlq/"+f.top.Consumer, nil)
	req.Header.Set("Authorization", "Bearer wrong")
	if r := f.do(req); r.status == http.StatusOK {
		t.Error("a wrong bearer token was let in")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if r := f.do(req); r.status != http.StatusOK {
		t.Errorf("bearer token: %d", r.status)
	}

	// The login form sets a cookie that lets the browser in.
	login := f.get("/login")
	csrf := match(t, csrfRE, login.body)
	if r := f.post("/login", url.Values{"csrf": {csrf}, "token": {"nope"}}); r.status != http.StatusUnauthorized {
		t.Errorf("wrong token at login: %d", r.status)
	}
	r := f.post("/login", url.Values{"csrf": {csrf}, "token": {token}, "next": {"/dlq/" + f.top.Consumer}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("login: %d\n%s", r.status, r.body)
	}
	if r := f.get("/dlq/" + f.top.Consumer); r.status != http.StatusOK {
		t.Errorf("after login: %d", r.status)
	}
	if strings.Contains(f.get("/").body, token) {
		t.Error("a page shows the token")
	}
}

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{BasicAuth: "ops:pa55word"})
	if r := f.get("/"); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("without credentials: %d %q", r.status, r.header.Get("WWW-Authenticate"))
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/dlq/"+f.top.Consumer, nil)
	req.SetBasicAuth("ops", "pa55word")
	if r := f.do(req); r.status != http.StatusOK {
		t.Errorf("with credentials: %d", r.status)
	}
}

func TestMessagePageEscapesAndMasks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	m := f.top.Message(testenv.Dead{ID: "evt-1", Type: "workitem.updated", Class: dlq.ClassPermanent, Err: `bad <script>alert("err")</script>`})
	m.Headers["x-note"] = `<script>alert("header")</script>`
	m.Headers["x-api-password"] = "hunter2 with spaces"
	m.Headers["x-callback"] = "https://bob:tops3cret@hooks.example/x"
	m.Body = []byte(`{"event_id":"evt-1","note":"<script>alert('body')</script>","password":"sw0rdfish"}`)
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{m})

	r := f.get("/dlq/" + f.top.Consumer + "/message?id=evt-1")
	if r.status != http.StatusOK {
		t.Fatalf("message page: %d\n%s", r.status, r.body)
	}
	if strings.Contains(r.body, "<script") {
		t.Errorf("the page holds a raw <script>:\n%s", r.body)
	}
	if !strings.Contains(r.body, "&lt;script&gt;alert(&#34;header&#34;)&lt;/script&gt;") {
		t.Errorf("the hostile header is not shown as text:\n%s", r.body)
	}
	for _, secret := range []string{"hunter2", "tops3cret", "sw0rdfish"} {
		if strings.Contains(r.body, secret) {
			t.Errorf("the page shows the secret %q", secret)
		}
	}
	for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} {
		if r.header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
}

// A dead letter that broke its contract shows the contract and the field
// apart from the error's text; one whose error named none shows neither.
func TestMessagePageShowsTheContractAndTheField(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	broken := f.top.Message(testenv.Dead{ID: "evt-c", Type: "workitem.updated", Class: dlq.ClassUndecodable, Attempts: 1,
		Err: "invalid event: contract workitem.updated@1.0: payload.data.state: got number, want string"})
	broken.Headers[dlq.HeaderErrorContract] = "workitem.updated@1.0"
	broken.Headers[dlq.HeaderErrorField] = "payload.data.state"
	plain := f.top.Message(testenv.Dead{ID: "evt-p", Type: "workitem.updated", Class: dlq.ClassPermanent, Attempts: 1, Err: "boom"})
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{broken, plain})
	r := f.get("/dlq/" + f.top.Consumer + "/message?id=evt-c")
	if r.status != http.StatusOK {
		t.Fatalf("message page: %d\n%s", r.status, r.body)
	}
	for _, want := range []string{`<td class="contract"><code>workitem.updated@1.0</code></td>`, `<td class="field"><code>payload.data.state</code></td>`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the page of a contract's dead letter lacks %s:\n%s", want, r.body)
		}
	}
	r = f.get("/dlq/" + f.top.Consumer + "/message?id=evt-p")
	if strings.Contains(r.body, `class="contract"`) || strings.Contains(r.body, `class="field"`) {
		t.Errorf("the page of a dead letter whose error named no field shows a contract or a field:\n%s", r.body)
	}
}

// A secret in an error text reaches no page's source, not even in part:
// the forms name a group by id, and a signature is masked before it is
// normalised (normalising "sw0rdfish" first leaves "rdfish" after the
// mask). A form naming a group the console never showed is refused.
func TestGroupPagesHoldNoSecretOfTheSignature(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 3, "login %d refused: password=sw0rdfish")
	csrf, _, body := f.groupsPage()
	group := match(t, groupRE, body)
	pages := map[string]string{"groups": body}
	pages["group"] = f.get("/dlq/" + f.top.Consumer + "/group/" + group).body
	pages["message"] = f.get("/dlq/" + f.top.Consumer + "/message?id=evt-1").body
	path := "/dlq/" + f.top.Consumer + "/replay"
	pages["confirm"] = f.post(path, url.Values{"csrf": {csrf}, "group": {group}, "scope": {"group"}}).body
	for name, page := range pages {
		if !strings.Contains(page, "password=") {
			t.Errorf("the %s page does not show the group's error:\n%s", name, page)
		}
		if strings.Contains(page, "rdfish") {
			t.Errorf("the %s page shows (part of) the secret:\n%s", name, page)
		}
	}
	if !strings.Contains(pages["confirm"], ">3<") {
		t.Errorf("the confirm page does not plan the group's 3 messages:\n%s", pages["confirm"])
	}
	r := f.post(path, url.Values{"csrf": {csrf}, "group": {strings.Repeat("0", len(group))}, "scope": {"group"}})
	if r.status == http.StatusOK || !strings.Contains(r.body, "reload the page") {
		t.Errorf("an unknown group: %d\n%s", r.status, r.body)
	}
	if n := f.depth(f.top.DLQ); n != 3 {
		t.Errorf("DLQ holds %d, want all 3", n)
	}
}

func TestExportReturnsJSONLines(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 4, "timeout %d")
	csrf, _, body := f.groupsPage()
	planned, r := f.act("export", url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
	if planned != "4" || r.status != http.StatusOK {
		t.Fatalf("export: planned %s, status %d\n%s", planned, r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/jsonl") {
		t.Errorf("Content-Type %q", ct)
	}
	msgs, err := dlqtool.ReadMessages(strings.NewReader(r.body))
	if err != nil || len(msgs) != 4 || strings.Count(r.body, "\n") != 4 {
		t.Fatalf("export: %d messages, %v\n%s", len(msgs), err, r.body)
	}
	if msgs[0].EventID != "evt-0" {
		t.Errorf("first exported %q", msgs[0].EventID)
	}
	if n := f.depth(f.top.DLQ); n != 4 {
		t.Errorf("DLQ holds %d after export, want 4", n)
	}
}

func TestPurgeArchivesBeforeDeleting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := newFixture(t, console.Config{ArchiveDir: dir})
	f.deadLetters("evt", 5, "timeout %d")
	f.deadLetters("keep", 1, "permanent: bad payload")
	csrf, _, _ := f.groupsPage()
	_, r := f.act("purge", url.Values{"csrf": {csrf}, "id": {"evt-1", "evt-3"}, "scope": {"selected"}})
	if !strings.Contains(r.body, `id="result-done">2<`) {
		t.Fatalf("purge result:\n%s", r.body)
	}
	if n := f.depth(f.top.DLQ); n != 4 {
		t.Errorf("DLQ holds %d, want 4", n)
	}
	msgs := archived(t, dir)
	if len(msgs) != 2 || msgs[0].EventID != "evt-1" || msgs[1].EventID != "evt-3" {
		t.Errorf("archive holds %d messages", len(msgs))
	}
	// A confirmation runs once: posting it again does nothing.
	if again := f.post("/dlq/"+f.top.Consumer+"/purge", url.Values{"csrf": {csrf}, "plan": {"stale"}}); again.status != http.StatusConflict {
		t.Errorf("stale plan: %d", again.status)
	}
}

// archived reads the one archive file a purge wrote in dir.
func archived(t *testing.T, dir string) []dlqtool.Message {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("archive files %v", files)
	}
	file, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	msgs, err := dlqtool.ReadMessages(file)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestOverviewListsConsumers(t *testing.T) {
	t.Parallel()
	testenv.RequireManagement(t)
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 3, "timeout %d")
	// The management API's figures lag the queues by its sampling
	// interval: ask until the DLQ's depth shows.
	want := regexp.MustCompile(`(?s)<tr class="consumer" id="consumer-` + regexp.QuoteMeta(f.top.Consumer) + `".*?<a class="dlq-link alert" href="/dlq/` + regexp.QuoteMeta(f.top.DLQ) + `">3</a>`)
	var body string
	testenv.WaitFor(t, 30*time.Second, "the overview to show the DLQ's 3 messages", func() bool {
		r := f.get("/")
		body = r.body
		return r.status == http.StatusOK && want.MatchString(body)
	})
	if !strings.Contains(body, `<meta http-equiv="refresh"`) {
		t.Error("the overview does not refresh itself")
	}
	if strings.Contains(body, "guest:guest") {
		t.Error("the overview shows the broker's password")
	}
}

func TestRedriveDeadOutboxRows(t *testing.T) {
	t.Parallel()
	ob := testenv.NewOutboxTable(t)
	ob.PublishN("ev", 6)
	ob.Exec(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(),
		last_error = 'publish ' || event_id || ': broker nacked after 5s, password=sw0rdfish' WHERE event_id IN ('ev-0', 'ev-1', 'ev-2', 'ev-3')`)
	ob.Exec(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(), last_error = 'no route' WHERE event_id = 'ev-4'`)
	f := newFixture(t, console.Config{DatabaseURL: testenv.DatabaseURL(t), Table: ob.Table.Name()})

	page := f.get("/outbox")
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="outbox-dead">5<`) {
		t.Fatalf("outbox page: %d\n%s", page.status, page.body)
	}
	group := regexp.MustCompile(`(?s)id="dead-group-([0-9a-f]+)".*?class="dead-group-count">4<`)
	dry := f.post("/outbox/redrive", url.Values{"csrf": {match(t, csrfRE, page.body)}, "scope": {"group"}, "group": {match(t, group, page.body)}})
	if got := match(t, countRE, dry.body); got != "4" {
		t.Fatalf("dry run counted %s, want 4", got)
	}
	if n := ob.Count("state = 'dead'"); n != 5 {
		t.Fatalf("the dry run changed rows: %d dead", n)
	}
	// The group's error is shown, its secret masked whole, not part of it
	// left by the numbers normalised out of it.
	for name, body := range map[string]string{"outbox": page.body, "confirm": dry.body} {
		if !strings.Contains(body, "password=") || strings.Contains(body, "rdfish") {
			t.Errorf("the %s page does not show the group's error, or shows (part of) its secret:\n%s", name, body)
		}
	}
	res := f.post("/outbox/redrive", url.Values{"csrf": {match(t, csrfRE, dry.body)}, "plan": {match(t, planRE, dry.body)}})
	if !strings.Contains(res.body, `id="result-done">4<`) {
		t.Fatalf("result:\n%s", res.body)
	}
	if n := ob.Count("state = 'dead'"); n != 1 {
		t.Errorf("%d rows still dead, want only ev-4", n)
	}
}

func TestPurgeDeletesNothingWhenTheArchiveFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{ArchiveDir: filepath.Join(t.TempDir(), "missing")})
	f.deadLetters("evt", 3, "timeout %d")
	csrf, _, body := f.groupsPage()
	_, r := f.act("purge", url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})
	if !strings.Contains(r.body, `id="result-error"`) || !strings.Contains(r.body, `id="result-done">0<`) {
		t.Fatalf("purge with an unwritable archive:\n%s", r.body)
	}
	if n := f.depth(f.top.DLQ); n != 3 {
		t.Errorf("DLQ holds %d, want all 3", n)
	}
}

func TestPurgeIsNotOfferedWithoutArchiveDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 1, "timeout %d")
	csrf, _, body := f.groupsPage()
	if strings.Contains(body, "purge-group") {
		t.Error("the page offers purge without an archive directory")
	}
	if r := f.post("/dlq/"+f.top.Consumer+"/purge", url.Values{"csrf": {csrf}, "id": {"evt-0"}, "scope": {"message"}}); r.status != http.StatusForbidden {
		t.Errorf("purge without an archive directory: %d, want 403", r.status)
	}
}

// Redriving "every" dead row when there are more than the page reads says
// how many of how many it will touch, and touches no more.
func TestRedriveAllBeyondTheScanLimit(t *testing.T) {
	t.Parallel()
	ob := testenv.NewOutboxTable(t)
	ob.PublishN("ev", 5)
	ob.Exec(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(), last_error = 'no route'`)
	f := newFixture(t, console.Config{DatabaseURL: testenv.DatabaseURL(t), Table: ob.Table.Name(), ScanLimit: 3})

	page := f.get("/outbox")
	dry := f.post("/outbox/redrive", url.Values{"csrf": {match(t, csrfRE, page.body)}, "scope": {"all"}})
	if got := match(t, countRE, dry.body); got != "3" {
		t.Fatalf("dry run counted %s, want 3", got)
	}
	if scope := match(t, regexp.MustCompile(`id="confirm-scope">([^<]*)<`), dry.body); !strings.Contains(scope, "oldest 3 of the 5") {
		t.Fatalf("the confirm page calls it %q; want it to say 3 of 5", scope)
	}
	res := f.post("/outbox/redrive", url.Values{"csrf": {match(t, csrfRE, dry.body)}, "plan": {match(t, planRE, dry.body)}})
	if !strings.Contains(res.body, `id="result-done">3<`) {
		t.Fatalf("result:\n%s", res.body)
	}
	if n := ob.Count("state = 'dead'"); n != 2 {
		t.Errorf("%d rows still dead, want 2", n)
	}
}

// A confirmed action runs in the background: its result page says it is
// running, with its counts, and reloads itself until the action ends;
// then it shows the outcome.
func TestResultPageShowsARunningAction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 5, "timeout %d")
	csrf, _, body := f.groupsPage()
	path := "/dlq/" + f.top.Consumer + "/replay"
	dry := f.post(path, url.Values{"csrf": {csrf}, "group": {match(t, groupRE, body)}, "scope": {"group"}})

	// While another operation holds the queue, the confirmed replay waits
	// for it: running, as a long replay would be.
	release := console.HoldQueue(t, f.console, f.top.Consumer)
	f.runningOK = true
	running := f.post(path, url.Values{"csrf": {csrf}, "plan": {match(t, planRE, dry.body)}})
	if !strings.HasPrefix(running.path, "/results/") || !strings.Contains(running.body, `data-state="running"`) ||
		!strings.Contains(running.body, `id="result-progress"`) || !strings.Contains(running.body, `<meta http-equiv="refresh" content="1">`) {
		t.Fatalf("result page of a running action (%s):\n%s", running.path, running.body)
	}
	if n := f.depth(f.top.DLQ); n != 5 {
		t.Fatalf("the replay ran while the queue was held: the DLQ holds %d", n)
	}
	release()
	f.runningOK = false
	done := f.get(running.path)
	if !strings.Contains(done.body, `data-state="done"`) || !strings.Contains(done.body, `id="result-done">5<`) || strings.Contains(done.body, `http-equiv="refresh"`) {
		t.Fatalf("result page once the action ended:\n%s", done.body)
	}
	if n := f.depth(f.top.Consumer); n != 5 {
		t.Fatalf("the origin queue got %d of 5", n)
	}
}

// A body that is not UTF-8 is shown as a hex dump, its secrets masked as
// a text body's are: in the hex and in the ASCII column alike.
func TestBinaryBodyIsMaskedInItsHexDump(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	m := f.top.Message(testenv.Dead{ID: "evt-bin", Type: "workitem.updated", Class: dlq.ClassUndecodable, Err: "not UTF-8"})
	m.Body = []byte("\xff\xfe\x00login attempt: user=bob password=sw0rdfish-2024 token=abcdef0123456789; api_key=\"k3y\xffwith-a-bad-byte\" \x80\x81 end")
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{m})

	r := f.get("/dlq/" + f.top.Consumer + "/message?id=evt-bin")
	if r.status != http.StatusOK || !strings.Contains(r.body, "not UTF-8: hex dump") {
		t.Fatalf("message page: %d\n%s", r.status, r.body)
	}
	dump := html.UnescapeString(match(t, regexp.MustCompile(`(?s)<pre class="body">(.*?)</pre>`), r.body))
	var shown []byte // the bytes the dump's hex column shows
	for line := range strings.Lines(dump) {
		hexPart, _, _ := strings.Cut(line, "|")
		if len(hexPart) < 10 {
			continue
		}
		for _, field := range strings.Fields(hexPart[10:]) {
			var b byte
			if _, err := fmt.Sscanf(field, "%02x", &b); err != nil {
				t.Fatalf("dump line %q: %v", line, err)
			}
			shown = append(shown, b)
		}
	}
	ascii := regexp.MustCompile(`\|([^|]*)\|`).FindAllStringSubmatch(dump, -1)
	var column strings.Builder
	for _, a := range ascii {
		column.WriteString(a[1])
	}
	for what, text := range map[string]string{"hex": string(shown), "ASCII": column.String()} {
		if !strings.Contains(text, "user=bob") || !strings.Contains(text, "password=") {
			t.Errorf("the dump's %s column does not show the body: %q", what, text)
		}
		for _, secret := range []string{"sw0rdfish", "abcdef0123456789", "k3y"} {
			if strings.Contains(text, secret) {
				t.Errorf("the dump's %s column shows the secret %q: %q", what, secret, text)
			}
		}
	}
}

// Header values shown in another form than text are masked too: bytes
// (shown in hex) and what tables and arrays hold (shown as JSON, with
// bytes in base64).
func TestHeaderBytesAndTablesAreMasked(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	m := f.top.Message(testenv.Dead{ID: "evt-h", Type: "workitem.updated", Class: dlq.ClassPermanent, Err: "bad"})
	m.Headers["x-raw"] = []byte("login password=sw0rdfish-2024")
	m.Headers["x-nested"] = amqp.Table{"api_key": "k3y-in-a-table", "calls": []any{[]byte("token=abcdef0123456789"), "secret=plain-in-array"}}
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{m})

	r := f.get("/dlq/" + f.top.Consumer + "/message?id=evt-h")
	if r.status != http.StatusOK || !strings.Contains(r.body, "x-nested") {
		t.Fatalf("message page: %d\n%s", r.status, r.body)
	}
	for _, secret := range []string{
		hex.EncodeToString([]byte("sw0rdfish")), "k3y-in-a-table", "plain-in-array",
		base64.StdEncoding.EncodeToString([]byte("token=abcdef0123456789")),
	} {
		if strings.Contains(r.body, secret) {
			t.Errorf("the page shows the secret %q", secret)
		}
	}
}

// A message's link opens its page whatever its event id holds: the link
// is encoded once, by the template, not twice.
func TestMessageLinksOpenIDsWithAnyCharacter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	ids := []string{"urn:evt:1", "a/b/c", "with space", "100%sure", "what?x=1", "frag#ment", "a&b=c+d", "ünï/çødé", "%2F%41"}
	var msgs []amqp.Publishing
	for _, id := range ids {
		msgs = append(msgs, f.top.Message(testenv.Dead{ID: id, Type: "workitem.updated", Class: dlq.ClassPermanent, Err: "bad payload"}))
	}
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, msgs)

	_, _, body := f.groupsPage()
	group := f.get("/dlq/" + f.top.Consumer + "/group/" + match(t, groupRE, body)).body
	links := regexp.MustCompile(`class="message-link" href="([^"]+)">([^<]*)<`).FindAllStringSubmatch(group, -1)
	if len(links) != len(ids) {
		t.Fatalf("%d message links, want %d:\n%s", len(links), len(ids), group)
	}
	for _, l := range links {
		href, id := html.UnescapeString(l[1]), html.UnescapeString(l[2])
		r := f.get(href)
		shown := regexp.MustCompile(`<section class="message" data-event-id="([^"]*)"`).FindStringSubmatch(r.body)
		if r.status != http.StatusOK || shown == nil || html.UnescapeString(shown[1]) != id {
			t.Errorf("the link of %q (%s): %d\n%s", id, href, r.status, r.body)
		}
	}
}

// A page of any web site the operator visits can make the browser GET a
// DLQ page of a console on loopback (an <img>): the Host is the console's
// own, there is no credential by default, and CSRF protection covers
// POSTs only. Each such GET would scan the queue (and on a quorum DLQ
// count a delivery of every message). Browsers say where a request came
// from: one from another site is refused.
func TestCrossSiteGETsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	f.deadLetters("evt", 3, "timeout %d")
	get := func(site string) int {
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/dlq/"+f.top.Consumer, nil)
		if site != "" {
			req.Header.Set("Sec-Fetch-Site", site)
			req.Header.Set("Sec-Fetch-Mode", "no-cors")
			req.Header.Set("Sec-Fetch-Dest", "image")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, site := range []string{"cross-site", "same-site"} {
		if got := get(site); got == http.StatusOK {
			t.Errorf("a %s image request read the DLQ (200)", site)
		}
	}
	for _, site := range []string{"same-origin", "none", ""} {
		if got := get(site); got != http.StatusOK {
			t.Errorf("a request with Sec-Fetch-Site %q: %d, want 200", site, got)
		}
	}
}

// Every field of a message that holds producer text is masked on its
// page and its group's page, properties, death records, origin and
// header names included, not only the headers' values and the body; and
// the outbox page masks a dead row's event id, type and entity likewise.
func TestMessagePagesMaskEveryField(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Config{})
	m := f.top.Message(testenv.Dead{ID: "evt-1", Type: "workitem.updated", Class: dlq.ClassExhausted, Attempts: 5, Err: "boom"})
	m.AppId = "amqp://svc:AppIdHunter2@broker.internal/"
	m.CorrelationId = "token=CorrSecret123"
	m.ReplyTo = "password=ReplyToSecret"
	m.Headers["x-death"] = []any{amqp.Table{"queue": "q", "reason": "rejected", "count": int64(1), "exchange": "password=DeathExSecret", "routing-keys": []any{"https://u:RKSecret9@h/"}}}
	m.Headers[dlq.HeaderOriginQueue] = "q?token=OriginQSecret"
	m.Headers[dlq.HeaderOriginExchange] = "password=OriginExSecret"
	m.Headers[dlq.HeaderOriginRoutingKey] = "secret=OriginRKSecret"
	m.Headers[dlq.HeaderConsumer] = "amqp://c:ConsumerSecret@h/"
	m.Headers[dlq.HeaderHost] = "password=HostSecret"
	m.Headers[dlq.HeaderErrorContract] = "password=ContractSecret"
	m.Headers[dlq.HeaderErrorField] = "payload.data.token=FieldSecret7"
	m.Headers["password=HeaderNameSecret"] = "v"
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{m})
	r := f.get("/dlq/" + f.top.Consumer + "/message?id=evt-1")
	if r.status != http.StatusOK {
		t.Fatalf("message page: %d\n%s", r.status, r.body)
	}
	_, _, groups := f.groupsPage()
	g := f.get("/dlq/" + f.top.Consumer + "/group/" + match(t, groupRE, groups))
	for _, secret := range []string{"AppIdHunter2", "CorrSecret123", "ReplyToSecret", "DeathExSecret", "RKSecret9", "OriginQSecret", "OriginExSecret", "OriginRKSecret", "ConsumerSecret", "HostSecret", "HeaderNameSecret", "ContractSecret", "FieldSecret7"} {
		if strings.Contains(r.body, secret) {
			t.Errorf("message page shows %q", secret)
		}
		if strings.Contains(g.body, secret) {
			t.Errorf("group page shows %q", secret)
		}
	}
}
