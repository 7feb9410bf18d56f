package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
)

var consoleCommand = command{name: "console", summary: "serve the web console: consumers, dead letters by failure, replay", run: runConsole}

// consoleOptions are the flags of 'warren console'.
type consoleOptions struct {
	listen, amqpURL, managementURL string
	db                             outboxDBFlags
	token, basicAuth, archiveDir   string
	allowHosts                     listFlag
	relays                         listFlag
	tlsCert, tlsKey                string
	readOnly, behindTLSProxy       bool
	refresh                        ageFlag
	scanLimit                      int
}

func (o *consoleOptions) register(fs *flagSet) {
	fs.String(&o.listen, "listen", "ADDR", "serve on this address; one other machines reach needs --token or --basic-auth, and --tls-cert/--tls-key or --behind-tls-proxy", console.DefaultListen)
	fs.Var(&o.allowHosts, "allow-host", "NAME[:PORT],...", "answer requests addressed to these names too (besides localhost, loopback addresses and the --listen address; with --behind-tls-proxy, only these, and at least one is needed): every other Host header is refused, against DNS rebinding")
	fs.String(&o.tlsCert, "tls-cert", "FILE", "serve HTTPS with this PEM certificate (chain)", "")
	fs.String(&o.tlsKey, "tls-key", "FILE", "the PEM private key of --tls-cert", "")
	fs.Bool(&o.behindTLSProxy, "behind-tls-proxy", "a proxy in front terminates TLS: mark cookies Secure, require --token or --basic-auth and --allow-host; the proxy must pass the original Host header on (X-Forwarded-* headers are not trusted)")
	fs.String(&o.amqpURL, "amqp-url", "URL", "the broker, or a cluster's nodes separated by commas; default $AMQP_URL, else "+redact.URL(amqpx.DefaultURL), "")
	fs.Var(&o.relays, "relay", "URL,...", "the relays' health addresses (warren relay run --health-addr), as http://HOST:PORT: the overview shows whether each one holds the stream back, and for which consumer's queue")
	fs.String(&o.managementURL, "management-url", "URL", "RabbitMQ's management API, for the overview; default http://HOST:15672 of the broker, same user", "")
	fs.String(&o.db.databaseURL, "database-url", "URL", "the Postgres database of the outbox table; default $DATABASE_URL, else no outbox section", "")
	fs.String(&o.db.table, "table", "NAME", fmt.Sprintf("the outbox table; default $WARREN_OUTBOX_TABLE, else %s (%s with --schema plane)", outbox.DefaultTable, outbox.DefaultPlaneTable), "")
	fs.String(&o.db.schema, "schema", "warren|plane", "the outbox table's layout; default $WARREN_SCHEMA, else warren", "")
	fs.String(&o.token, "token", "TOKEN", "require this token (bearer header, or the login form); default $WARREN_CONSOLE_TOKEN, which keeps it out of the process list", "")
	fs.String(&o.basicAuth, "basic-auth", "USER:PASS", "accept HTTP basic auth with these credentials; default $WARREN_CONSOLE_BASIC_AUTH", "")
	fs.Bool(&o.readOnly, "read-only", "show everything, change nothing: no replay, export, purge or redrive")
	fs.String(&o.archiveDir, "archive-dir", "DIR", "a purge first writes the messages it deletes to a file here, synced to disk; without it, purging is not offered", "")
	fs.Var(&o.refresh, "refresh", "DURATION", fmt.Sprintf("how often the overview reloads itself (default %v)", console.DefaultRefresh))
	fs.Int(&o.scanLimit, "scan-limit", "N", "the most messages a dead-letter queue's page reads to group them", console.DefaultScanLimit)
}

func runConsole(ctx context.Context, env *cliEnv, args []string) error {
	o := &consoleOptions{}
	fs := newFlagSet()
	o.register(fs)
	if len(args) > 0 && isHelp(args[0]) {
		printConsoleUsage(env.stdout, fs)
		return flag.ErrHelp
	}
	rest, err := fs.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		printConsoleUsage(env.stdout, fs)
		return err
	}
	if err != nil {
		return usagef("%v", err)
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	cfg := console.Config{
		Listen:         o.listen,
		AMQPURL:        cmp.Or(o.amqpURL, env.getenv("AMQP_URL"), amqpx.DefaultURL),
		ManagementURL:  o.managementURL,
		Token:          cmp.Or(o.token, env.getenv("WARREN_CONSOLE_TOKEN")),
		BasicAuth:      cmp.Or(o.basicAuth, env.getenv("WARREN_CONSOLE_BASIC_AUTH")),
		AllowedHosts:   o.allowHosts,
		Relays:         o.relays,
		TLSCertFile:    o.tlsCert,
		TLSKeyFile:     o.tlsKey,
		BehindTLSProxy: o.behindTLSProxy,
		ReadOnly:       o.readOnly,
		ArchiveDir:     o.archiveDir,
		Refresh:        time.Duration(o.refresh),
		ScanLimit:      o.scanLimit,
		Logger:         redact.Logger(slog.New(slog.NewTextHandler(env.stderr, nil))),
	}
	if o.db.databaseURL = cmp.Or(o.db.databaseURL, env.getenv("DATABASE_URL")); o.db.databaseURL != "" {
		if err := o.db.resolve(env); err != nil {
			return err
		}
		cfg.DatabaseURL, cfg.Table, cfg.Schema = o.db.databaseURL, o.db.table, outbox.Schema(o.db.schema)
	}
	if cfg.ScanLimit <= 0 {
		return usagef("--scan-limit must be positive")
	}
	s, err := console.New(cfg)
	if err != nil {
		return o.db.redact(err)
	}
	printBroker(env.stderr, cfg.AMQPURL)
	if cfg.DatabaseURL != "" {
		printDatabase(env.stderr, cfg.DatabaseURL, cfg.Table)
	}
	return o.db.redact(s.Serve(ctx))
}

func printConsoleUsage(w io.Writer, fs *flagSet) {
	fmt.Fprintln(w, "Usage: warren console [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, wrap("Serve the operator's web console until SIGINT or SIGTERM: every consumer's queues, dead-letter and retry depths and rates; each dead-letter queue's messages grouped by failure signature (class and error text with ids, numbers, hosts and durations normalised), each group opening to its messages and each message to its headers, failure history and body; replay, export and purge of a group, a selection or one message, and redrive of dead outbox rows. Every action shows a dry run with the number of messages it will touch and acts, once confirmed, on exactly those. Beyond this machine it needs --token or --basic-auth, and --tls-cert/--tls-key or --behind-tls-proxy; it answers only to localhost, loopback addresses, the --listen address and --allow-host names. Pages need no JavaScript. Passwords and secret-looking header values are never shown.", 78))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags:")
	fs.printDefaults(w)
	fmt.Fprintln(w, "\nExamples:")
	fmt.Fprintln(w, "  warren console")
	fmt.Fprintln(w, "  WARREN_CONSOLE_TOKEN=$(openssl rand -hex 16) warren console --listen :8443 --allow-host console.example.com --tls-cert cert.pem --tls-key key.pem --archive-dir /var/lib/warren/archive")
	fmt.Fprintln(w, "  warren console --read-only --database-url postgres://app@db/app")
	fmt.Fprintln(w, "  warren console --relay http://relay-1:9464,http://relay-2:9464")
}
