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

// A client that stalls halfway through a request, or idles on a kept-alive
// connection, is disconnected by the server. The bounds are short here so
// the test is quick; New's differ only in length.
func TestStalledClientsAreDisconnected(t *testing.T) {
	const bound = 200 * time.Millisecond
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})
	srv := bounded("", handler, bound, 2*bound, 5*bound, 2*bound)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	for name, sent := range map[string]string{
		"half a header":        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow:",
		"headers, half a body": "POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"half\":",
		"idle after a request": "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, sent); err != nil {
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
