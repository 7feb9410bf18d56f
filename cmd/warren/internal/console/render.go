package console

import (
	"bytes"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/cmd/warren/internal/inventory"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/redact"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	return http.StripPrefix("/static/", http.FileServerFS(sub))
}

// page is what the layout gets: the page's own data in Data.
type page struct {
	Title     string
	CSRF      string
	ReadOnly  bool
	Auth      bool // a session to log out of
	HasOutbox bool
	Refresh   int // seconds; 0: no meta refresh
	Now       time.Time
	Data      any
}

var funcs = template.FuncMap{
	"ago": ago,
	// heldBy is how many relays the consumer's queue, or one of its
	// partitions, holds back (Config.Relays).
	"heldBy": func(held map[string]int, c inventory.Consumer) int {
		n := 0
		if c.Queue.Name != "" {
			n = held[c.Queue.Name]
		}
		for _, p := range c.Partitions {
			n += held[p.Name]
		}
		return n
	},
	// age is how long ago t was, "–" for none (a queue's oldest message
	// without a timestamp, or a quorum queue, which reports none).
	"age": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return duration(time.Since(t))
	},
	"ts":   func(t time.Time) string { return formatTime(t) },
	"path": url.PathEscape,
	"rate": func(f float64) string { return fmt.Sprintf("%.1f/s", f) },
	"join": strings.Join,
}

// parseTemplates parses each page with the layout, one set per page, so
// that every page can define its own "content".
func parseTemplates() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, name := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, name)
		if err != nil {
			return nil, err
		}
		out[base] = t
	}
	return out, nil
}

// render writes the page name with data, rendered to a buffer first so
// that a template error becomes a 500 instead of half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	p := page{Title: title, CSRF: s.csrfToken(r), ReadOnly: s.cfg.ReadOnly, Auth: s.cfg.Token != "", HasOutbox: s.outbox != nil, Now: time.Now(), Data: data}
	if name == "overview" && s.cfg.Refresh > 0 && r.URL.Query().Get("refresh") != "off" {
		p.Refresh = max(1, int(s.cfg.Refresh.Seconds()))
	}
	if o, ok := data.(outcome); ok && o.Running {
		p.Refresh = 1 // a running action's counts, every second, until it ends
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		s.cfg.Logger.Error("render page", "page", name, "error", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail renders an error page. The error's text is redacted: it may quote
// a URL or a broker's message.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	s.render(w, r, status, "error", "Error", redact.Secrets(err.Error()))
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// ago is how long ago t was, compactly ("" when unknown).
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return duration(time.Since(t)) + " ago"
}

func duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// slow lets a handler that reads a whole queue (a page, a dry run, an
// action) answer after WriteTimeout, which is there for clients that read
// slowly, not for a broker that has many messages to hand over.
func slow(w http.ResponseWriter, d time.Duration) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

// header is one message header as a page shows it.
type header struct{ Name, Value string }

// headerRows renders headers sorted by name, each value masked whole when
// the name looks like a secret's and through redact.Secrets otherwise.
func headerRows(h amqp.Table) []header {
	out := make([]header, 0, len(h))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		v := "xxxxx"
		if !redact.SecretName(k) {
			v = redact.Secrets(dlqtool.HeaderText(maskValue(h[k])))
		}
		out = append(out, header{shownText(k), v})
	}
	return out
}

// maskValue is a header value with its secrets masked where HeaderText
// would show them in another form than text: bytes (shown in hex), and
// inside tables and arrays (shown as JSON, bytes in base64), where a
// secret-looking name masks its value whole.
func maskValue(v any) any {
	switch x := v.(type) {
	case []byte:
		return []byte(redact.Secrets(string(x)))
	case string:
		return redact.Secrets(x)
	case amqp.Table:
		out := make(amqp.Table, len(x))
		for k, e := range x {
			name := redact.Secrets(k)
			out[name] = "xxxxx"
			if !redact.SecretName(k) {
				out[name] = maskValue(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = maskValue(e)
		}
		return out
	}
	return v
}

// body is a message body as a page shows it: indented JSON, text, or a hex
// dump for anything that is not UTF-8. Secret-looking values are masked.
type body struct {
	Text   string
	Binary bool
	Size   int
}

func bodyView(b []byte) body {
	if !utf8.Valid(b) {
		// Masked on the bytes, by the text's rules, before the dump: a
		// dump shows every byte twice (in hex and as ASCII), and a
		// password=... amid bytes that are not UTF-8 is still one.
		// redact.Secrets copies what it does not mask byte for byte.
		return body{Text: hex.Dump([]byte(redact.Secrets(string(b)))), Binary: true, Size: len(b)}
	}
	text := string(b)
	var pretty bytes.Buffer
	if json.Indent(&pretty, b, "", "  ") == nil {
		text = pretty.String()
	}
	return body{Text: redact.Secrets(text), Size: len(b)}
}

// sortedCounts is a map's keys, largest count first.
func sortedCounts(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
func pathEscape(s string) string     { return url.PathEscape(s) }
