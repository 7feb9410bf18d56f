package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Cookie names.
const (
	csrfCookie    = "warren_console_csrf"
	sessionCookie = "warren_console_session"
)

// CSRFField is the name of the hidden form field every POST must carry.
const CSRFField = "csrf"

// securityHeaders sets the headers every answer carries: no script, no
// framing, no content sniffing, no caching of pages that show messages.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// checkHost refuses, with 421, a request whose Host the console was not
// told it is reached by (hostAllowed), whatever the configuration: that
// is a DNS rebinding attack. A page at evil.example whose name then
// resolves to the console's address is same-origin with the console to
// the browser, so it could read the pages, take the CSRF token from a
// form, and replay, purge or export; with credentials it still could,
// through a login form it fills in itself or a session the operator
// logged in to under that name. Its requests carry its own name as Host.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			http.Error(w, fmt.Sprintf("this console does not answer to the name %q: reach it as localhost, by a loopback address, or by a name given to warren console --allow-host", r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a request's Host header names the console:
// localhost or a loopback address (any port), the IP address it listens
// on, or one of Config.AllowedHosts (any port, or the one it gives). An IP
// address is safe to answer to: a rebinding page's requests carry its own
// name, never an address.
//
// Behind a TLS proxy only AllowedHosts are: the requests all come from the
// proxy, and one that sets Host to its upstream's (127.0.0.1:8089) would
// make every request, a rebinding page's too, pass as loopback.
func (s *Server) hostAllowed(hostport string) bool {
	host, port := splitHost(hostport)
	if !s.cfg.BehindTLSProxy && isLoopback(hostport) {
		return true
	}
	if host == "" {
		return false
	}
	if listen, _ := splitHost(s.cfg.Listen); listen == host && !s.cfg.BehindTLSProxy {
		if ip := net.ParseIP(listen); ip != nil && !ip.IsUnspecified() {
			return true
		}
	}
	for _, allowed := range s.cfg.AllowedHosts {
		h, p := splitHost(allowed)
		if h == host && (p == "" || p == port) {
			return true
		}
	}
	return false
}

// splitHost splits a Host header or listen address into its host, lower
// case and without brackets or a final dot, and its port ("" if none).
func splitHost(hostport string) (host, port string) {
	host = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), ".")), port
}

// isLoopback reports whether hostport (a Host header or a listen address,
// port optional) names this machine's loopback.
func isLoopback(hostport string) bool {
	host, _ := splitHost(hostport)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listensOnLoopback reports whether a listen address can only be bound
// to loopback: a loopback IP address, or exactly "localhost" (a name the
// resolver answers from the hosts file). Anything else, "localhost." (a
// fully qualified name, asked of DNS) included, may resolve anywhere;
// Serve checks the address bound as well (checkBound).
func listensOnLoopback(listen string) bool {
	host := listen
	if h, _, err := net.SplitHostPort(listen); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkBound refuses a listener bound beyond loopback for a console
// without credentials: the listen address was judged by its name, and a
// hosts file or resolver may map even "localhost" elsewhere.
func (c Config) checkBound(addr net.Addr) error {
	if c.Token != "" || c.BasicAuth != "" {
		return nil
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s is bound to %s, reachable from other machines; set a token or basic auth, or listen on 127.0.0.1", ErrExposed, c.Listen, addr)
}

// crossSite refuses, with 403, a request a browser says another site made
// (Sec-Fetch-Site cross-site or same-site), on every page but the login
// form and static files: a GET of a queue's page scans the queue (and on
// a quorum queue counts a delivery of every message), and any web page
// the operator visits can make the browser send one (an <img>). CSRF
// tokens cover POSTs only. Requests without the header (curl, older
// browsers) are let through; Host and authentication still apply.
func crossSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site := r.Header.Get("Sec-Fetch-Site")
		if site != "" && site != "same-origin" && site != "none" && r.URL.Path != "/login" && !strings.HasPrefix(r.URL.Path, "/static/") {
			http.Error(w, "request from another site refused: open the console directly; nothing was read or changed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// mac is HMAC-SHA256 of parts under the process's secret, base64url.
func (s *Server) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.secret)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// equal compares secrets in constant time; hashing first hides their
// lengths too.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

func randomString() string {
	b := make([]byte, 24)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// authenticated reports whether r carries the token (bearer header or a
// session's cookie) or the basic auth credentials the config asks for.
func (s *Server) authenticated(r *http.Request) bool {
	if s.cfg.Token == "" && s.cfg.BasicAuth == "" {
		return true
	}
	if s.cfg.Token != "" {
		// The cookie holds a random session id, not the token: it
		// ends at logout, after sessionTTL, and with the process.
		if c, err := r.Cookie(sessionCookie); err == nil {
			if _, ok := s.sessions.get(c.Value); ok {
				return true
			}
		}
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(bearer, s.cfg.Token) {
			return true
		}
	}
	if s.cfg.BasicAuth != "" {
		if user, pass, ok := r.BasicAuth(); ok && equal(user+":"+pass, s.cfg.BasicAuth) {
			return true
		}
	}
	return false
}

// requireAuth lets authenticated requests through. Others get the login
// form (token configured, a page request) or a 401 with a basic auth
// challenge. A bearer token or basic auth password is a guess like the
// login form's: wrong ones count against the address, and an address
// locked out is refused (429) whatever it presents, but a session
// already started is not.
func (s *Server) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/") {
			next.ServeHTTP(w, r)
			return
		}
		// A bearer token or basic auth password is a try of a secret,
		// counted before it is checked (see loginLimiter).
		var counted bool
		if r.Header.Get("Authorization") != "" {
			var ok bool
			if counted, ok = s.try(w, r); !ok {
				return
			}
		}
		if s.authenticated(r) {
			s.logins.succeeded(clientAddress(r), counted)
			next.ServeHTTP(w, r)
			return
		}
		if s.cfg.Token != "" && r.Method == http.MethodGet {
			http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if s.cfg.BasicAuth != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="warren console", charset="UTF-8"`)
		}
		http.Error(w, "authentication required", http.StatusUnauthorized)
	})
}

// try counts a try of a secret from r's address, or answers 429 and
// returns false when that address has used up its tries (see
// loginFailures). counted is for loginLimiter.succeeded.
func (s *Server) try(w http.ResponseWriter, r *http.Request) (counted, ok bool) {
	client := clientAddress(r)
	wait, counted, ok := s.logins.attempt(client)
	if ok {
		return counted, true
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)))
	s.fail(w, r, http.StatusTooManyRequests, fmt.Errorf("too many wrong tokens or passwords from %s: try again in %v", client, wait.Round(time.Second)))
	return false, false
}

type csrfKey struct{}

// csrf gives every client a random cookie and checks every POST's form
// field against an HMAC of it: a page of another site can make a browser
// send the cookie, but cannot read the token out of our pages. Origin and
// Sec-Fetch-Site are checked first (http.CrossOriginProtection), for
// browsers that send them.
func (s *Server) csrf(next http.Handler) http.Handler {
	checked := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(csrfCookie)
		var value string
		if err == nil && len(c.Value) >= 32 {
			value = c.Value
		}
		if r.Method == http.MethodPost {
			if value == "" || !equal(r.PostFormValue(CSRFField), s.mac("csrf", value)) {
				s.fail(w, r, http.StatusForbidden, errors.New("missing or wrong CSRF token: reload the page and try again; nothing was changed"))
				return
			}
		}
		if value == "" {
			value = randomString()
			http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: value, Path: "/", HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode})
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), csrfKey{}, value)))
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusForbidden, errors.New("cross-origin request refused; nothing was changed"))
	}))
	return cop.Handler(checked)
}

// secure reports whether cookies set in answer to r are marked Secure:
// when r came over TLS, or a TLS proxy is said to be in front. The
// proxy's X-Forwarded-Proto is not trusted: anyone can send it.
func (s *Server) secure(r *http.Request) bool { return r.TLS != nil || s.cfg.BehindTLSProxy }

// csrfToken is the token the forms of the page answering r carry.
func (s *Server) csrfToken(r *http.Request) string {
	v, _ := r.Context().Value(csrfKey{}).(string)
	return s.mac("csrf", v)
}

// readOnly refuses, with 403, the actions a read-only console does not
// offer.
func (s *Server) readOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.ReadOnly {
			s.fail(w, r, http.StatusForbidden, errors.New("this console is read-only; nothing was changed"))
			return
		}
		next(w, r)
	}
}

// sessionTTL is how long a login lasts; sessions bounds how many are
// kept at once (the oldest is dropped, logged out, beyond it).
const (
	sessionTTL = 12 * time.Hour
	sessions   = 1000
)

// login serves the token form (GET) and checks it (POST), starting a
// session. An address that sent loginFailures wrong tokens within
// loginWindow is refused, with 429, until that window ends: a short token
// cannot be guessed by trying.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.FormValue("next"))
	if s.cfg.Token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	status, failed := http.StatusOK, false
	if r.Method == http.MethodPost {
		counted, ok := s.try(w, r)
		if !ok {
			return
		}
		if equal(r.PostFormValue("token"), s.cfg.Token) {
			s.logins.succeeded(clientAddress(r), counted)
			http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.sessions.put(struct{}{}), Path: "/", MaxAge: int(sessionTTL / time.Second), HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		status, failed = http.StatusUnauthorized, true
	}
	s.render(w, r, status, "login", "Log in", struct {
		Next   string
		Failed bool
	}{next, failed})
}

// localPath returns next if it is a path on this console, else "/": the
// login's redirect must not lead elsewhere (an open redirect). Browsers
// read a backslash as a slash and drop tabs and newlines from a URL, so
// "/\evil.example" and "/<TAB>/evil.example" mean "//evil.example", another
// host, to them; url.Parse refuses those control characters.
func localPath(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(next, "/") ||
		strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/"
	}
	return next
}

// logout ends the session server-side, so a copy of its cookie is no
// longer let in, and clears the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.take(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
