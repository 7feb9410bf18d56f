package amqpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
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

// CheckURL returns an error when rawURL is not an AMQP URL the client can
// dial. The parser's error quotes the raw URL, and a password that makes it
// unparsable (an unescaped '%' or '#') comes back in it, in pieces: the
// error returned has every piece masked.
func CheckURL(rawURL string) error {
	if _, err := amqp.ParseURI(rawURL); err != nil {
		return fmt.Errorf("AMQP URL %s: %s", redact.URL(rawURL), redact.Text(err.Error(), rawURL))
	}
	return nil
}

// Dial opens one AMQP connection. Errors name the redacted URL.
func Dial(ctx context.Context, rawURL string, opts DialOptions) (*amqp.Connection, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 10 * time.Second
	}
	props := amqp.NewConnectionProperties()
	if opts.Name != "" {
		props.SetClientConnectionName(opts.Name)
	}
	cfg := amqp.Config{
		Heartbeat:  opts.Heartbeat,
		Properties: props,
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
			return conn, nil
		},
	}
	conn, err := amqp.DialConfig(rawURL, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", redact.URL(rawURL), err)
	}
	return conn, nil
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

// DialRetry dials until it succeeds or ctx ends, waiting between attempts
// as b says and logging each failure once with the redacted URL.
func DialRetry(ctx context.Context, rawURL string, opts DialOptions, b backoff.BackOff, log *slog.Logger) (*amqp.Connection, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err // no retry mends it
	}
	b.Reset()
	for attempt := 1; ; attempt++ {
		conn, err := Dial(ctx, rawURL, opts)
		if err == nil {
			if attempt > 1 {
				log.Info("connected to broker", "url", redact.URL(rawURL), "attempts", attempt)
			}
			return conn, nil
		}
		wait := b.NextBackOff()
		log.Warn("broker unreachable, will retry", "error", err, "attempt", attempt, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial %s: %w (last error: %v)", redact.URL(rawURL), ctx.Err(), err)
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
