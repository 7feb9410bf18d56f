package console

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
)

// Defaults of [Config].
const (
	DefaultListen    = "127.0.0.1:8089"
	DefaultRefresh   = 10 * time.Second
	DefaultScanLimit = 10000
)

// Config configures a [Server]. The zero value serves the local broker
// without an outbox section, on [DefaultListen], with no authentication.
type Config struct {
	// AMQPURL is the broker, or a cluster's nodes separated by commas.
	// Default amqpx.DefaultURL.
	AMQPURL string
	// ManagementURL is RabbitMQ's management HTTP API, for the overview.
	// Empty: derived from AMQPURL (http://host:15672, same user).
	ManagementURL string
	// Inventory lists the consumers for the overview. Nil: one built from
	// AMQPURL and ManagementURL.
	Inventory Inventory

	// DatabaseURL is the Postgres database holding the outbox table.
	// Empty: no outbox section.
	DatabaseURL string
	// Table and Schema name the outbox table (outbox.Open).
	Table  string
	Schema outbox.Schema

	// Listen is the address Serve listens on. Default [DefaultListen]:
	// only this machine. Any address other machines can reach (another
	// interface, every interface, a host name) is refused unless Token or
	// BasicAuth is set and the console serves TLS (TLSCertFile) or says it
	// sits behind a proxy that does (BehindTLSProxy): a console open to
	// the network replays and purges for whoever reaches it.
	Listen string
	// AllowedHosts are the names (or name:port) requests may carry in
	// their Host header besides localhost, loopback addresses and the IP
	// address Listen names. Every other Host is refused with 421: that is
	// how a page whose DNS name was rebound to the console's address
	// (DNS rebinding) is kept from reading its pages and posting its
	// forms. Name here the name(s) operators and a proxy reach it by.
	AllowedHosts []string
	// TLSCertFile and TLSKeyFile, PEM files, make Serve answer HTTPS only.
	TLSCertFile, TLSKeyFile string
	// BehindTLSProxy says a proxy in front terminates TLS: cookies are
	// marked Secure though requests reach the console over plain HTTP.
	// X-Forwarded-* headers are still not trusted (not for the Host
	// check, the scheme or the client's address). It needs Token or
	// BasicAuth and AllowedHosts whatever Listen is, and then only
	// AllowedHosts names are answered (not localhost or an address): a
	// proxy that rewrote Host to its upstream's would otherwise pass
	// every request, a DNS-rebinding page's too. The proxy must pass the
	// original Host on (nginx: proxy_set_header Host $host).
	BehindTLSProxy bool
	// Token, when set, must be presented as a bearer token or through the
	// login form.
	Token string
	// BasicAuth, "user:password", when set, is accepted as HTTP basic
	// auth (with Token set too, either one lets a request in).
	BasicAuth string
	// ReadOnly hides every action and refuses its POST with 403.
	ReadOnly bool
	// Relays are the relays' health addresses (`warren relay run
	// --health-addr`), as http://HOST:PORT. The overview reads each one's
	// /healthz and shows whether it holds the stream back (relay.Config's
	// HoldBack) and for which consumer's queue, or is blocked by the
	// broker. Empty: no relays section.
	Relays []string

	// ArchiveDir is where a purge writes (and syncs) the messages it is
	// about to delete. Empty: purging is not offered.
	ArchiveDir string

	// Refresh is how often the overview reloads itself. Default
	// [DefaultRefresh]; negative turns it off.
	Refresh time.Duration
	// ScanLimit is the most messages a dead-letter queue's page reads to
	// group them. Default [DefaultScanLimit]. Actions are not bounded by
	// it: their dry run counts every message they will touch.
	ScanLimit int

	Logger *slog.Logger
}

// withDefaults returns c with its defaults filled in, or an error for a
// setting that cannot work.
func (c Config) withDefaults() (Config, error) {
	c.AMQPURL = cmp.Or(c.AMQPURL, amqpx.DefaultURL)
	if err := amqpx.CheckURL(c.AMQPURL); err != nil {
		return c, err
	}
	c.Listen = cmp.Or(c.Listen, DefaultListen)
	if err := c.checkExposure(); err != nil {
		return c, err
	}
	if c.Refresh == 0 {
		c.Refresh = DefaultRefresh
	}
	c.ScanLimit = cmp.Or(c.ScanLimit, DefaultScanLimit)
	if c.ScanLimit < 0 {
		return c, errors.New("console: ScanLimit must not be negative")
	}
	if c.BasicAuth != "" {
		if user, pass, ok := strings.Cut(c.BasicAuth, ":"); !ok || user == "" || pass == "" {
			return c, fmt.Errorf("console: basic auth must be user:password")
		}
	}
	for _, r := range c.Relays {
		if err := checkRelayAddress(r); err != nil {
			return c, fmt.Errorf("console: relay %q: %v: want the relay's health address as http://HOST:PORT", redact.URL(r), err)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// ErrExposed is wrapped by the error of [New] for a console that would
// listen where other machines reach it without credentials or without TLS.
var ErrExposed = errors.New("console: refusing to serve beyond this machine")

// checkExposure refuses a configuration that lets other machines in
// without credentials (they could replay, purge and export unmasked
// messages) or that sends the credentials over plain HTTP, and a TLS
// setting that is half there.
func (c Config) checkExposure() error {
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("console: TLS needs both a certificate and a key file")
	}
	credentials := c.Token != "" || c.BasicAuth != ""
	if c.BehindTLSProxy {
		// A proxy's clients are other machines, whatever address the
		// console listens on behind it; and the proxy's own requests come
		// from loopback with whatever Host it sets, so only the names it
		// is reached by (passed on as the original Host) can be trusted.
		if !credentials {
			return fmt.Errorf("%w: behind a TLS proxy, other machines reach the console; set a token (--token or $WARREN_CONSOLE_TOKEN) or basic auth", ErrExposed)
		}
		if len(c.AllowedHosts) == 0 {
			return fmt.Errorf("%w: behind a TLS proxy, name the host(s) the proxy is reached by with --allow-host, and have the proxy pass the original Host header on", ErrExposed)
		}
	}
	if listensOnLoopback(c.Listen) {
		return nil
	}
	if !credentials {
		return fmt.Errorf("%w: %s is reachable from other machines; set a token (--token or $WARREN_CONSOLE_TOKEN) or basic auth, or listen on 127.0.0.1", ErrExposed, c.Listen)
	}
	if c.TLSCertFile == "" && !c.BehindTLSProxy {
		return fmt.Errorf("%w: %s is reachable from other machines over plain HTTP, which shows the token to the network; serve TLS (--tls-cert and --tls-key) or say a proxy in front does (--behind-tls-proxy)", ErrExposed, c.Listen)
	}
	return nil
}

// checkRelayAddress refuses a relay address the overview would read
// wrongly: /healthz is added to it, so it has no path, query or fragment
// of its own, and it names a host and a port that can exist.
func checkRelayAddress(addr string) error {
	u, err := url.Parse(addr)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("not http or https")
	case u.Hostname() == "":
		return errors.New("no host")
	case u.Path != "" && u.Path != "/", u.RawQuery != "" || u.ForceQuery, u.Fragment != "" || strings.Contains(addr, "#"):
		return errors.New("a path, query or fragment, where /healthz is added")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("no such port")
		}
	}
	return nil
}
