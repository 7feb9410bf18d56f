package console

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
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
	// only this machine. Anything wider should set Token or BasicAuth.
	Listen string
	// Token, when set, must be presented as a bearer token or through the
	// login form.
	Token string
	// BasicAuth, "user:password", when set, is accepted as HTTP basic
	// auth (with Token set too, either one lets a request in).
	BasicAuth string
	// ReadOnly hides every action and refuses its POST with 403.
	ReadOnly bool
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
