package amqpx

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/redact"
)

// DefaultURL is the broker the examples, the command and the tests use when
// AMQP_URL is not set.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// DialOptions tune [Dial].
type DialOptions struct {
	// Name is the connection_name client property: what `rabbitmqctl
	// list_connections client_properties` and the management UI show.
	Name string
	// Timeout bounds the TCP connect and the AMQP handshake. Default 10s.
	Timeout time.Duration
	// Heartbeat is the AMQP heartbeat interval. Default 10s, so a dead
	// peer is noticed within about 20s instead of the OS TCP timeout.
	Heartbeat time.Duration
}

// SplitURLs returns the broker URLs in list: one AMQP URL, or several
// separated by commas, the nodes of one cluster. A comma inside a URL (in
// a password) does not split it: a URL starts only where "amqp://" or
// "amqps://" follows the comma. Space around the commas is dropped; an
// empty element stays, for CheckURL to refuse.
func SplitURLs(list string) []string {
	var urls []string
	for _, part := range strings.Split(list, ",") {
		lower := strings.ToLower(strings.TrimSpace(part))
		isStart := lower == "" || strings.HasPrefix(lower, "amqp://") || strings.HasPrefix(lower, "amqps://")
		if len(urls) > 0 && !isStart {
			urls[len(urls)-1] += "," + part
			continue
		}
		urls = append(urls, part)
	}
	for i := range urls {
		urls[i] = strings.TrimSpace(urls[i])
	}
	return urls
}

// RedactURLs is list with the password of each of its URLs masked, for
// logs. (redact.URL on the whole list masks too, but runs one URL's
// password to the last '@' of the list, hiding the hosts between.)
func RedactURLs(list string) string {
	urls := SplitURLs(list)
	for i, u := range urls {
		urls[i] = redact.URL(u)
	}
	return strings.Join(urls, ",")
}

// CheckURL returns an error when list is not one or more AMQP URLs the
// client can dial (see [SplitURLs]). The parser's error quotes the raw
// URL, and a password that makes it unparsable (an unescaped '%' or '#')
// comes back in it, in pieces: the error returned has every piece masked.
func CheckURL(list string) error {
	for _, u := range SplitURLs(list) {
		if _, err := amqp.ParseURI(u); err != nil {
			return fmt.Errorf("AMQP URL %s: %s", redact.URL(u), redact.Text(err.Error(), u))
		}
	}
	return nil
}

// Dial opens one AMQP connection to a node of list (see [SplitURLs]). With
// several nodes it tries them in turn, from one chosen at random, and
// returns the first connection one accepts: clients given the same list
// spread over the nodes, and after a node is lost a client reaches another
// one in the same call. Errors name every redacted URL tried; the
// connection's RemoteAddr says which node answered.
func Dial(ctx context.Context, list string, opts DialOptions) (*amqp.Connection, error) {
	if err := CheckURL(list); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 10 * time.Second
	}
	urls := SplitURLs(list)
	first := rand.IntN(len(urls))
	var errs []error
	for i := range urls {
		conn, err := dialOne(ctx, urls[(first+i)%len(urls)], opts)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// dialOne dials one node's URL. Every connection reads through a
// [frameFilter], so a message whose headers amqp091-go cannot read reaches
// warren as a readable one that says so, instead of closing the
// connection. For amqps the filter must read the plaintext: the dialer does
// the TLS handshake (amqp091-go would do it on the connection it is
// given, under the filter) and amqp091-go is given the URL as amqp.
func dialOne(ctx context.Context, rawURL string, opts DialOptions) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	if opts.Name != "" {
		props.SetClientConnectionName(opts.Name)
	}
	dialURL, tlsConfig, err := plainURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %s", redact.URL(rawURL), redact.Text(err.Error(), rawURL))
	}
	cfg := amqp.Config{
		Heartbeat:  opts.Heartbeat,
		Properties: props,
		FrameSize:  frameMax,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: opts.Timeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// amqp091-go clears this deadline once the handshake is done.
			if err := conn.SetDeadline(time.Now().Add(opts.Timeout)); err != nil {
				conn.Close()
				return nil, err
			}
			if tlsConfig != nil {
				tc := tls.Client(conn, tlsConfig)
				if err := tc.HandshakeContext(ctx); err != nil {
					conn.Close()
					return nil, err
				}
				conn = tc
			}
			return newFrameFilter(conn), nil
		},
	}
	conn, err := amqp.DialConfig(dialURL, cfg)
	if err != nil {
		if refused := refusal(rawURL, err); refused != nil {
			return nil, refused
		}
		return nil, fmt.Errorf("dial %s: %w", redact.URL(rawURL), err)
	}
	// Every size limit of warren's (the frame filter's, dlq.Fit's margins
	// for a copy's record, the relays' MaxContentHeader) is set for a
	// frame_max of frameMax. Below it a copy with warren's record could be
	// over the broker's frame_max: the broker closes the connection at
	// each attempt and the message never leaves the head of its queue. A
	// broker that offers less is refused, as a refusal no retry mends.
	if n := conn.Config.FrameSize; n < frameMax {
		conn.Close()
		return nil, &refusedError{
			msg: fmt.Sprintf("dial %s: the broker's frame_max is %d bytes, below the %d warren needs: set frame_max = %d (or 0) in rabbitmq.conf", redact.URL(rawURL), n, frameMax, frameMax),
			err: errors.New("frame_max too small"),
		}
	}
	return conn, nil
}

// plainURL returns rawURL as amqp091-go is to dial it: an amqps URL
// becomes amqp with its port made explicit, and the TLS configuration
// amqp091-go would have made from it (cacertfile, certfile, keyfile and
// server_name_indication, TLS 1.2 at least) is returned for the dialer.
func plainURL(rawURL string) (string, *tls.Config, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil || uri.Scheme != "amqps" {
		return rawURL, nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, err
	}
	u.Scheme, u.Host = "amqp", net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	cfg := &tls.Config{ServerName: cmp.Or(uri.ServerName, uri.Host), MinVersion: tls.VersionTLS12}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return "", nil, fmt.Errorf("read CA certificate: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("no PEM certificate in %s", uri.CACertFile)
		}
	}
	if uri.CertFile != "" && uri.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return "", nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return u.String(), cfg, nil
}

// ErrRefused is matched (errors.Is) by a dial error for which the broker
// refused the user's credentials (403 ACCESS_REFUSED during the handshake)
// or access to the vhost (530 NOT_ALLOWED, or a missing vhost), or offered
// a frame_max below the 128 KiB warren's limits are set for: a retry
// cannot mend any, so [DialRetry] returns it at once instead of
// reporting the broker unreachable forever.
var ErrRefused = errors.New("the broker refused the connection")

// refusedError is a dial error the broker's refusal caused, worded for the
// operator who has to fix the URL.
type refusedError struct {
	msg string
	err error
}

func (e *refusedError) Error() string   { return e.msg }
func (e *refusedError) Unwrap() []error { return []error{ErrRefused, e.err} }

// refusal returns err as a refusedError when the broker refused the
// credentials or the vhost of rawURL, else nil. Of RabbitMQ's 530
// NOT_ALLOWED replies, only "vhost X not found" and "access to vhost X
// refused for user Y" are refusals: "connection limit ... is reached"
// passes once other connections close, and "vhost X is down" while a
// node recovers the vhost (a restarting cluster node says it).
func refusal(rawURL string, err error) error {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return nil
	}
	uri, perr := amqp.ParseURI(rawURL)
	if perr != nil {
		return nil
	}
	at, reason := redact.URL(rawURL), redact.Text(ae.Reason, rawURL)
	switch {
	case errors.Is(err, amqp.ErrVhost) || ae.Code == amqp.NotAllowed && vhostRefused(ae.Reason):
		return &refusedError{fmt.Sprintf("vhost %q does not exist or user %s has no access to it, at %s: create the vhost or grant the user access (rabbitmqctl set_permissions -p VHOST USER ...), or fix the URL's path (%s)",
			uri.Vhost, uri.Username, at, reason), err}
	case ae.Code == amqp.AccessRefused:
		return &refusedError{fmt.Sprintf("RabbitMQ refused the credentials for user %s at %s: check the user and password (%s)", uri.Username, at, reason), err}
	}
	return nil
}

func vhostRefused(reason string) bool {
	return !strings.Contains(reason, "limit") && (strings.Contains(reason, "not found") || strings.Contains(reason, "refused"))
}

// NewBackOff returns the reconnect policy warren uses everywhere:
// exponential from 100ms to max with ±50% jitter, never giving up (the
// caller's context decides when to stop).
func NewBackOff(max time.Duration) backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = max
	b.RandomizationFactor = 0.5
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// DialRetry dials list (see [Dial]) until a node accepts, or ctx ends,
// waiting between rounds over the nodes as b says and logging each failed
// round once with the redacted URLs. A refusal (an error matching
// [ErrRefused]: bad credentials, a missing vhost) is returned at once:
// users and vhosts are the cluster's, so no node and no wait would do
// better. It logs the node it reached when that
// took more than one round or list names several nodes. b is reset
// first: give DialRetry a backoff of its own, never one the caller also
// draws its pauses from, or those pauses never grow.
func DialRetry(ctx context.Context, list string, opts DialOptions, b backoff.BackOff, log *slog.Logger) (*amqp.Connection, error) {
	if err := CheckURL(list); err != nil {
		return nil, err // no retry mends it
	}
	b.Reset()
	for attempt := 1; ; attempt++ {
		conn, err := Dial(ctx, list, opts)
		if err == nil {
			if attempt > 1 || len(SplitURLs(list)) > 1 {
				log.Info("connected to broker", "node", conn.RemoteAddr().String(), "attempts", attempt)
			}
			return conn, nil
		}
		if errors.Is(err, ErrRefused) {
			return nil, err
		}
		wait := b.NextBackOff()
		log.Warn("broker unreachable, will retry", "error", err, "attempt", attempt, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial %s: %w (last error: %v)", RedactURLs(list), ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Hostname is the host name dead-letter metadata records; "unknown" when
// the OS will not say.
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// CloseConnection closes conn, giving the broker at most timeout to agree.
// The deadline also applies to writes already stuck on the socket (a broker
// that blocked the connection stops reading it), which then fail, so
// nothing waiting on this connection outlives the call by much.
func CloseConnection(conn *amqp.Connection, timeout time.Duration) error {
	err := conn.CloseDeadline(time.Now().Add(timeout))
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
