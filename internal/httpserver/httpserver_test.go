package httpserver

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

func TestNewSetsEveryTimeout(t *testing.T) {
	s := New("127.0.0.1:0", http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Fatalf("timeouts %v %v %v %v: every one must be set", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout)
	}
}

// bound is the timeout under test: short, so the tests are quick. New's
// differ only in length.
const bound = 200 * time.Millisecond

// serve starts bounded's server for h on a local port.
func serve(t *testing.T, h http.Handler, readHeader, read, write, idle time.Duration) (addr string) {
	t.Helper()
	srv := bounded("", h, readHeader, read, write, idle)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// A client that stalls halfway through a request, or idles on a kept-alive
// connection, is disconnected by the server. Each case sets only the
// timeout it tests (net/http falls back from one to another: ReadTimeout
// covers the headers too, and bounds idling when IdleTimeout is 0), so
// that bounded without that timeout fails it.
func TestStalledClientsAreDisconnected(t *testing.T) {
	drain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})
	for _, tc := range []struct {
		name                          string
		readHeader, read, write, idle time.Duration
		sent                          string
	}{
		{name: "half a header (ReadHeaderTimeout)", readHeader: bound,
			sent: "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow:"},
		{name: "headers, half a body (ReadTimeout)", read: bound,
			sent: "POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"half\":"},
		{name: "idle after a request (IdleTimeout)", idle: bound,
			sent: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", serve(t, drain, tc.readHeader, tc.read, tc.write, tc.idle))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.sent); err != nil {
				t.Fatal(err)
			}
			// The server must close the connection long before this
			// deadline, which only keeps a failing test from hanging.
			conn.SetReadDeadline(time.Now().Add(50 * bound))
			_, err = io.Copy(io.Discard, conn)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the server still held the connection after %v", 50*bound)
			}
		})
	}
}

// A client that does not read its answer cannot hold the handler writing
// it: with only WriteTimeout set, the handler's write fails once the
// answer fills the connection's buffers.
func TestSlowReaderIsDisconnected(t *testing.T) {
	writeErr := make(chan error, 1)
	chunk := make([]byte, 64<<10)
	endless := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
	})
	conn, err := net.Dial("tcp", serve(t, endless, 0, 0, bound, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing. The deadline only keeps a failing test
	// from hanging.
	select {
	case <-writeErr:
	case <-time.After(50 * bound):
		t.Fatalf("the handler was still writing to a client that reads nothing after %v", 50*bound)
	}
}
