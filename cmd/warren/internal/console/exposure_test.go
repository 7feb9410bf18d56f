package console_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	"github.com/warrenmq/warren/internal/testenv"
)

// A page whose DNS name was rebound to the console's address sends its
// own name as Host. It is refused on every route, before authentication,
// the login form and CSRF: with a token configured too, and whatever
// credentials the request carries (a page can fill in a login form, and a
// browser may hold a session for that name). Nothing is changed.
func TestDNSRebindingIsRefusedOnEveryRoute(t *testing.T) {
	t.Parallel()
	const token = "s3cret-console-token"
	for name, cfg := range map[string]console.Config{
		"no token": {ArchiveDir: t.TempDir()},
		"token":    {Token: token, ArchiveDir: t.TempDir()},
		"basic":    {BasicAuth: "ops:pa55word", ArchiveDir: t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, cfg)
			f.deadLetters("evt", 3, "timeout %d")
			f.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			// A real session and CSRF token, got under the console's
			// own name, which the rebinding page then sends along.
			var csrf string
			if cfg.Token != "" {
				csrf = match(t, csrfRE, f.get("/login").body)
				if r := f.post("/login", url.Values{"csrf": {csrf}, "token": {token}}); r.status != http.StatusSeeOther {
					t.Fatalf("login: %d", r.status)
				}
			}
			q := "/dlq/" + f.top.Consumer
			for _, route := range []struct{ method, path string }{
				{"GET", "/"}, {"GET", "/login"}, {"POST", "/login"}, {"POST", "/logout"},
				{"GET", "/static/console.css"}, {"GET", "/dlq?queue=" + f.top.Consumer}, {"GET", q},
				{"GET", q + "/group/0"}, {"GET", q + "/message?id=evt-1"}, {"GET", "/outbox"}, {"GET", "/results/x"},
				{"POST", q + "/replay"}, {"POST", q + "/purge"}, {"POST", q + "/export"}, {"POST", "/outbox/redrive"},
			} {
				form := url.Values{"csrf": {csrf}, "token": {token}, "id": {"evt-0", "evt-1", "evt-2"}, "scope": {"selected"}}
				req, _ := http.NewRequest(route.method, f.srv.URL+route.path, strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Host = "evil.example:" + strconv.Itoa(f.srv.Listener.Addr().(*net.TCPAddr).Port)
				switch {
				case cfg.Token != "":
					req.Header.Set("Authorization", "Bearer "+token)
				case cfg.BasicAuth != "":
					req.SetBasicAuth("ops", "pa55word")
				}
				if r := f.send(req); r.status != http.StatusMisdirectedRequest {
					t.Errorf("%s %s with Host %s: %d, want 421\n%s", route.method, route.path, req.Host, r.status, r.body)
				}
			}
			if n := f.depth(f.top.DLQ); n != 3 {
				t.Errorf("the DLQ holds %d, want all 3", n)
			}
		})
	}
}

// The names a console answers to: loopback ones always, the address it
// listens on, and the names it was given, on any port or the one given.
// (Behind a TLS proxy, only the names given: see
// TestHostCheckBehindARewritingProxy.)
func TestHostCheckAllowsTheConsolesNames(t *testing.T) {
	t.Parallel()
	certFile, keyFile := testCert(t)
	s, err := console.New(console.Config{
		Listen: "10.1.2.3:8443", Token: "t0ken-for-the-test", TLSCertFile: certFile, TLSKeyFile: keyFile,
		AllowedHosts: []string{"Console.Example.com", "ops.example:8443"},
		AMQPURL:      "amqp://guest:guest@127.0.0.1:1/",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for host, want := range map[string]int{
		"localhost:8443": http.StatusOK, "127.0.0.1": http.StatusOK, "[::1]:8443": http.StatusOK,
		"10.1.2.3:8443": http.StatusOK, "console.example.com": http.StatusOK, "CONSOLE.example.com.:443": http.StatusOK,
		"ops.example:8443": http.StatusOK, "ops.example:9999": http.StatusMisdirectedRequest,
		"evil.example": http.StatusMisdirectedRequest, "console.example.com.evil.example": http.StatusMisdirectedRequest,
		"10.1.2.4:8443": http.StatusMisdirectedRequest, "": http.StatusMisdirectedRequest,
	} {
		if got := hostStatus(s, host); got != want {
			t.Errorf("Host %q: %d, want %d", host, got, want)
		}
	}
}

// A console other machines can reach never starts without credentials,
// nor with them over plain HTTP unless a TLS proxy is said to be in front.
func TestListenBeyondLoopbackNeedsCredentialsAndTLS(t *testing.T) {
	t.Parallel()
	const amqpURL = "amqp://guest:guest@127.0.0.1:1/"
	certFile, keyFile := testCert(t)
	for _, c := range []struct {
		name string
		cfg  console.Config
		ok   bool
	}{
		{"every interface, nothing", console.Config{Listen: ":8089"}, false},
		{"0.0.0.0, nothing", console.Config{Listen: "0.0.0.0:8089"}, false},
		{"an interface, nothing", console.Config{Listen: "10.1.2.3:8089"}, false},
		{"a host name, nothing", console.Config{Listen: "console.internal:8089"}, false},
		{"IPv6 wildcard, TLS but no credentials", console.Config{Listen: "[::]:8089", TLSCertFile: certFile, TLSKeyFile: keyFile}, false},
		{"token over plain HTTP", console.Config{Listen: ":8089", Token: "t0ken-for-the-test"}, false},
		{"basic auth over plain HTTP", console.Config{Listen: ":8089", BasicAuth: "ops:pa55word"}, false},
		{"token and TLS", console.Config{Listen: ":8089", Token: "t0ken-for-the-test", TLSCertFile: certFile, TLSKeyFile: keyFile}, true},
		{"basic auth behind a TLS proxy", console.Config{Listen: ":8089", BasicAuth: "ops:pa55word", BehindTLSProxy: true, AllowedHosts: []string{"console.example"}}, true},
		{"behind a TLS proxy on loopback, nothing", console.Config{Listen: "127.0.0.1:8089", BehindTLSProxy: true, AllowedHosts: []string{"console.example"}}, false},
		{"behind a TLS proxy, no --allow-host", console.Config{Listen: "127.0.0.1:8089", Token: "t0ken-for-the-test", BehindTLSProxy: true}, false},
		{"localhost. (a DNS name), nothing", console.Config{Listen: "localhost.:8089"}, false},
		{"loopback, nothing", console.Config{Listen: "127.0.0.1:8089"}, true},
		{"localhost, nothing", console.Config{Listen: "localhost:8089"}, true},
		{"half a TLS setting", console.Config{TLSCertFile: certFile}, false},
	} {
		c.cfg.AMQPURL = amqpURL
		s, err := console.New(c.cfg)
		if s != nil {
			s.Close()
		}
		if (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok=%v", c.name, err, c.ok)
		}
		if !c.ok && c.cfg.TLSCertFile == "" && !errors.Is(err, console.ErrExposed) {
			t.Errorf("%s: %v does not wrap ErrExposed", c.name, err)
		}
	}
}

// With a certificate the console serves HTTPS, and only HTTPS; its
// cookies are Secure.
func TestServesTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile := testCert(t)
	s, err := console.New(console.Config{Listen: "127.0.0.1:0", TLSCertFile: certFile, TLSKeyFile: keyFile, AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.ServeListener(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := client.Get("https://" + ln.Addr().String() + "/results/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.TLS == nil {
		t.Fatalf("GET over TLS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	if c := cookieNamed(resp, "warren_console_csrf"); c == nil || !c.Secure {
		t.Errorf("the CSRF cookie over TLS is not Secure: %v", c)
	}
	if resp, err := http.Get("http://" + ln.Addr().String() + "/results/x"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP to the TLS console: %d", resp.StatusCode)
		}
	}
}

// Behind a TLS proxy, which the console is told of, cookies are Secure
// though requests arrive over plain HTTP; without it, a request's own
// X-Forwarded-Proto does not make them so.
func TestCookiesSecureBehindTLSProxy(t *testing.T) {
	t.Parallel()
	for _, behind := range []bool{true, false} {
		s, err := console.New(console.Config{Token: "t0ken-for-the-test", BehindTLSProxy: behind, AllowedHosts: []string{"console.example"}, AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		login := func(req *http.Request) *http.Response {
			req.Host = "console.example"
			req.Header.Set("X-Forwarded-Proto", "https")
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			return w.Result()
		}
		form := login(httptest.NewRequest(http.MethodGet, "/login", nil))
		csrfCookie := cookieNamed(form, "warren_console_csrf")
		body := new(strings.Builder)
		if _, err := io.Copy(body, form.Body); err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"csrf": {match(t, csrfRE, body.String())}, "token": {"t0ken-for-the-test"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(csrfCookie)
		session := cookieNamed(login(req), "warren_console_session")
		if session == nil {
			t.Fatalf("behind=%v: no session cookie after login", behind)
		}
		if csrfCookie.Secure != behind || session.Secure != behind {
			t.Errorf("behind a TLS proxy %v: CSRF cookie Secure %v, session cookie Secure %v", behind, csrfCookie.Secure, session.Secure)
		}
	}
}

func cookieNamed(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// testCert writes a self-signed certificate for 127.0.0.1 and its key,
// made for this test, and returns their files.
func testCert(t *testing.T) (certFile, keyFile string) {
	_, certFile, keyFile = testenv.SelfSignedCert(t)
	return certFile, keyFile
}

// A reverse proxy that sets Host to its upstream (Go's
// httputil.ProxyRequest.SetURL does, as nginx's default
// proxy_set_header Host $proxy_host does) must not make every request,
// whatever name it was sent to, pass the Host check: a DNS-rebinding
// page's included. Behind a proxy only --allow-host names are answered.
func TestHostCheckBehindARewritingProxy(t *testing.T) {
	t.Parallel()
	s, err := console.New(console.Config{Listen: "127.0.0.1:0", BehindTLSProxy: true, Token: "t0ken-for-the-test", AllowedHosts: []string{"console.example"}, AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	upstream := httptest.NewServer(s.Handler())
	t.Cleanup(upstream.Close)
	target, _ := url.Parse(upstream.URL)
	rewriting := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }})
	t.Cleanup(rewriting.Close)
	passing := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = r.In.Host }})
	t.Cleanup(passing.Close)
	status := func(proxy *httptest.Server, host string) int {
		req, _ := http.NewRequest(http.MethodGet, proxy.URL+"/login", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(rewriting, "rebound.evil.example"); got != http.StatusMisdirectedRequest {
		t.Errorf("a request for rebound.evil.example through a Host-rewriting proxy got %d, want 421", got)
	}
	if got := status(passing, "rebound.evil.example"); got != http.StatusMisdirectedRequest {
		t.Errorf("a request for rebound.evil.example through a proxy got %d, want 421", got)
	}
	if got := status(passing, "console.example"); got != http.StatusOK {
		t.Errorf("a request for console.example through a proxy passing Host got %d, want 200", got)
	}
}

// A console without credentials refuses to serve on a listener bound
// beyond loopback, whatever name the listen address gave.
func TestServeRefusesANonLoopbackListenerWithoutCredentials(t *testing.T) {
	t.Parallel()
	s, err := console.New(console.Config{AMQPURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Bounded: a console that does serve returns when this ends.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.ServeListener(ctx, ln); !errors.Is(err, console.ErrExposed) {
		t.Errorf("serving on %s without credentials: %v, want ErrExposed", ln.Addr(), err)
	}
}
