// Package serviceenvtest helps the example services' tests reach what
// they serve.
package serviceenvtest

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// FreeAddr is a loopback address nothing listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// WaitForMetrics GETs url until its body holds every one of lines, failing
// t after a minute, or at once if the service stopped (its error, put back
// in done, is for Stop).
func WaitForMetrics(t testing.TB, url string, done chan error, lines ...string) {
	t.Helper()
	var body string
	testenv.WaitFor(t, time.Minute, "the metrics "+strings.Join(lines, ", "), func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the service stopped: %v\n%s", err, body)
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		for _, l := range lines {
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, l) {
				return false
			}
		}
		return true
	})
}

// Stop stops a service running in this process the way an operator does,
// with SIGINT, which its RunUntilSignal takes, and waits for its run to
// return on done (1 buffered), failing t if it failed. A service that
// already stopped is not signalled: with no handler left, SIGINT would end
// the test process.
func Stop(t testing.TB, done chan error) {
	t.Helper()
	var err error
	select {
	case err = <-done:
	default:
		if kerr := syscall.Kill(os.Getpid(), syscall.SIGINT); kerr != nil {
			t.Fatal(kerr)
		}
		err = <-done
	}
	if err != nil {
		t.Errorf("run: %v", err)
	}
}
