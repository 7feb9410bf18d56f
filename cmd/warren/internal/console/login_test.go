package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
)

// The login's redirect stays on the console, whatever next says: browsers
// drop tabs and newlines from a URL and read a backslash as a slash, so
// each of these would send them to another host. No broker is needed: the
// console connects to nothing until a page needs it.
func TestLoginNextStaysOnTheConsole(t *testing.T) {
	t.Parallel()
	// Basic auth and no token: GET /login redirects to next at once.
	s, err := console.New(console.Config{BasicAuth: "ops:pa55word", AllowedHosts: []string{httptestHost}, AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, next := range []string{
		"https://evil.example/", "//evil.example/", "/\\evil.example/",
		"/\t/evil.example/", "/\n/evil.example/", "/\r/evil.example/", "/\t\\evil.example/",
	} {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/login?next="+url.QueryEscape(next), nil))
		if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != "/" {
			t.Errorf("next %q: %d to %q, want 303 to /", next, w.Code, loc)
		}
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/login?next="+url.QueryEscape("/dlq/webhook?x=1"), nil))
	if loc := w.Header().Get("Location"); loc != "/dlq/webhook?x=1" {
		t.Errorf("a path of the console: redirected to %q", loc)
	}
}

// Without authentication, on loopback (the default), the console answers
// only requests addressed to localhost or a loopback address: a page whose
// name was rebound to 127.0.0.1 sends its own name as Host, and must not
// read the pages or post their forms.
func TestLoopbackConsoleRefusesOtherHostNames(t *testing.T) {
	t.Parallel()
	s, err := console.New(console.Config{AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for host, want := range map[string]int{
		"evil.example:8089": http.StatusMisdirectedRequest,
		"evil.example":      http.StatusMisdirectedRequest,
		"127.0.0.1:8089":    http.StatusOK,
		"localhost:8089":    http.StatusOK,
		"[::1]:8089":        http.StatusOK,
	} {
		if got := hostStatus(s, host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	// With a token too: a rebinding page can fill in the login form,
	// and a session started under its name is its own. Names the console
	// is told of are answered.
	s2, err := console.New(console.Config{Token: "t0ken-for-the-test", AllowedHosts: []string{"console.internal"}, AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for host, want := range map[string]int{"console.internal:8089": http.StatusOK, "evil.example:8089": http.StatusMisdirectedRequest} {
		if got := hostStatus(s2, host); got != want {
			t.Errorf("with a token, Host %s: %d, want %d", host, got, want)
		}
	}
}

// hostStatus is the status of a request for the stylesheet with Host
// host. X-Forwarded-Host, which anyone can send, names the console: it
// must change nothing.
func hostStatus(s *console.Server, host string) int {
	req := httptest.NewRequest(http.MethodGet, "/static/console.css", nil)
	req.Host = host
	req.Header.Set("X-Forwarded-Host", "console.example.com")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	return w.Code
}

// httptestHost is the Host of httptest.NewRequest's requests, which a
// console must be told to answer to.
const httptestHost = "example.com"

// loginClient is a browser of a token console served by httptest: a
// cookie jar, redirects not followed, and a clock the test moves on.
type loginClient struct {
	t     *testing.T
	srv   *httptest.Server
	c     *http.Client
	clock time.Time
}

func newLoginClient(t *testing.T, token string) *loginClient {
	t.Helper()
	s, err := console.New(console.Config{Token: token, AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	lc := &loginClient{t: t, clock: time.Now()}
	console.SetClock(s, func() time.Time { return lc.clock })
	lc.srv = httptest.NewServer(s.Handler())
	t.Cleanup(lc.srv.Close)
	jar, _ := cookiejar.New(nil)
	lc.c = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return lc
}

func (lc *loginClient) do(method, path string, form url.Values, cookies ...*http.Cookie) *http.Response {
	lc.t.Helper()
	req, _ := http.NewRequest(method, lc.srv.URL+path, strings.NewReader(form.Encode()))
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	c := lc.c
	if len(cookies) > 0 {
		// Only the cookies given, as a stolen copy would be sent.
		c = &http.Client{CheckRedirect: lc.c.CheckRedirect}
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		lc.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// csrf reads the login form's CSRF token, which every POST needs.
func (lc *loginClient) csrf() string {
	lc.t.Helper()
	resp, err := lc.c.Get(lc.srv.URL + "/login")
	if err != nil {
		lc.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	if m == nil {
		lc.t.Fatalf("no CSRF field in the login form:\n%s", body)
	}
	return string(m[1])
}

func (lc *loginClient) login(token string) *http.Response {
	return lc.do(http.MethodPost, "/login", url.Values{"csrf": {lc.csrf()}, "token": {token}})
}

// session is the session cookie the jar holds.
func (lc *loginClient) session() *http.Cookie {
	u, _ := url.Parse(lc.srv.URL)
	for _, c := range lc.c.Jar.Cookies(u) {
		if c.Name == "warren_console_session" {
			return c
		}
	}
	lc.t.Fatal("no session cookie")
	return nil
}

// lets reports whether a page behind the login is served with cookies
// (the jar's when none are given); /results/x is one that needs no broker
// (404 inside, a redirect to the login outside).
func (lc *loginClient) lets(cookies ...*http.Cookie) bool {
	lc.t.Helper()
	resp := lc.do(http.MethodGet, "/results/x", nil, cookies...)
	return resp.StatusCode != http.StatusSeeOther
}

// A session ends at logout: a copy of its cookie, kept by whoever saw it,
// no longer lets anyone in. And after 12 hours whatever happens.
func TestLogoutAndTimeEndTheSession(t *testing.T) {
	t.Parallel()
	const token = "s3cret-console-token"
	lc := newLoginClient(t, token)
	if r := lc.login(token); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", r.StatusCode)
	}
	stolen := lc.session()
	if !lc.lets() || !lc.lets(stolen) {
		t.Fatal("the session does not let its browser in")
	}
	if r := lc.do(http.MethodPost, "/logout", url.Values{"csrf": {lc.csrf()}}); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", r.StatusCode)
	}
	if lc.lets(stolen) {
		t.Error("the cookie of a session that logged out still lets a request in")
	}

	lc.login(token)
	if !lc.lets() {
		t.Fatal("a second login does not let the browser in")
	}
	lc.clock = lc.clock.Add(12*time.Hour + time.Second)
	if lc.lets() {
		t.Error("a session 12 hours old still lets a request in")
	}
}

// Five wrong tokens from one address within a minute and that address is
// refused, even with the right token, until the minute is over.
func TestWrongTokensLockTheAddressOut(t *testing.T) {
	t.Parallel()
	const token = "s3cret-console-token"
	lc := newLoginClient(t, token)
	for i := range 5 {
		if r := lc.login("guess-" + strconv.Itoa(i)); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token #%d: %d, want 401", i+1, r.StatusCode)
		}
	}
	r := lc.login(token)
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("the right token after 5 wrong ones: %d (Retry-After %q), want 429 with Retry-After", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if lc.lets() {
		t.Fatal("a refused login let the browser in")
	}
	lc.clock = lc.clock.Add(time.Minute)
	if r := lc.login(token); r.StatusCode != http.StatusSeeOther || !lc.lets() {
		t.Errorf("the right token once the minute is over: %d", r.StatusCode)
	}
}

// Wrong basic auth passwords and bearer tokens count like the login
// form's wrong tokens: the sixth request is refused, right or wrong,
// until the minute is over.
func TestWrongPasswordsLockTheAddressOut(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]console.Config{
		"basic auth": {BasicAuth: "ops:pa55word"},
		"bearer":     {Token: "s3cret-console-token"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg.AMQPURL, cfg.AllowedHosts = "amqp://guest:guest@127.0.0.1:1/", []string{httptestHost}
			s, err := console.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			clock := time.Now()
			console.SetClock(s, func() time.Time { return clock })
			get := func(secret string) int {
				req := httptest.NewRequest(http.MethodGet, "/results/x", nil)
				if cfg.BasicAuth != "" {
					req.SetBasicAuth("ops", secret)
				} else {
					req.Header.Set("Authorization", "Bearer "+secret)
				}
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, req)
				return w.Code
			}
			right := strings.TrimPrefix(cfg.BasicAuth, "ops:") + cfg.Token
			if code := get(right); code != http.StatusNotFound {
				t.Fatalf("the right secret: %d, want 404 (no such result)", code)
			}
			for i := range 5 {
				if code := get("guess-" + strconv.Itoa(i)); code == http.StatusNotFound || code == http.StatusTooManyRequests {
					t.Fatalf("wrong secret #%d: %d", i+1, code)
				}
			}
			if code := get(right); code != http.StatusTooManyRequests {
				t.Fatalf("the right secret after 5 wrong ones: %d, want 429", code)
			}
			clock = clock.Add(time.Minute)
			if code := get(right); code != http.StatusNotFound {
				t.Errorf("the right secret once the minute is over: %d, want 404", code)
			}
		})
	}
}

// Guesses sent at once are each counted before the token is checked: of
// twenty, five are checked and refused (401), the rest locked out (429).
func TestParallelGuessesAreCountedBeforeTheCheck(t *testing.T) {
	t.Parallel()
	s, err := console.New(console.Config{Token: "s3cret-console-token", AllowedHosts: []string{httptestHost}, AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	form := httptest.NewRecorder()
	s.Handler().ServeHTTP(form, httptest.NewRequest(http.MethodGet, "/login", nil))
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(form.Body.String())
	if m == nil {
		t.Fatalf("no CSRF field in the login form:\n%s", form.Body)
	}
	cookies := form.Result().Cookies()
	codes := make(chan int, 20)
	var wg sync.WaitGroup
	for i := range cap(codes) {
		wg.Go(func() {
			body := url.Values{"csrf": {m[1]}, "token": {"guess-" + strconv.Itoa(i)}}.Encode()
			req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for _, c := range cookies {
				req.AddCookie(c)
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			codes <- w.Code
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusUnauthorized] != 5 || count[http.StatusTooManyRequests] != 15 {
		t.Errorf("answers %v, want 5 × 401 and 15 × 429", count)
	}
}
