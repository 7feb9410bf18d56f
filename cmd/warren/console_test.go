package main

import (
	"bufio"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
)

// warren console, as built, serves on the address it logs, names the
// broker with its password masked, refuses actions when read-only, and
// stops on SIGINT with status 0.
func TestCLIConsoleServesAndStops(t *testing.T) {
	t.Parallel()
	testenv.RequireManagement(t)
	cmd := warrenCmd(t, nil, "console", "--listen", "127.0.0.1:0", "--read-only")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	// Read the log until the console says where it serves; keep what
	// it printed for the checks below.
	var printed strings.Builder
	serving := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/)`)
	lines := bufio.NewScanner(stderr)
	var base string
	for base == "" && lines.Scan() {
		printed.WriteString(lines.Text() + "\n")
		if m := serving.FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("the console exited without saying where it serves:\n%s", printed.String())
	}
	go io.Copy(io.Discard, stderr) // the rest of the log, so the console never blocks writing it

	if !strings.Contains(printed.String(), "broker amqp://") || strings.Contains(printed.String(), "guest:guest") {
		t.Errorf("the console does not name the broker, or shows its password:\n%s", printed.String())
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="overview"`) || !strings.Contains(string(body), `id="read-only"`) {
		t.Fatalf("GET /: %d\n%s", resp.StatusCode, body)
	}
	resp, err = http.PostForm(base+"dlq/anything/replay", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST an action to a read-only console: %d, want 403", resp.StatusCode)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the console did not stop cleanly on SIGINT: %v", err)
	}
}

func TestCLIConsoleBadListen(t *testing.T) {
	t.Parallel()
	r := runWarren(t, nil, "console", "--listen", "127.0.0.1:notaport")
	if r.code != 1 || !strings.Contains(r.stderr, "listen") {
		t.Fatalf("console --listen 127.0.0.1:notaport: exit %d, want 1 and why\nstderr: %s", r.code, r.stderr)
	}
}

// A console other machines could reach does not start without a token or
// basic auth, and says why; with one (--basic-auth), not over plain HTTP
// unless a TLS proxy is named.
func TestCLIConsoleRefusesToServeTheNetworkOpen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", ":0"}, "set a token"},
		{[]string{"--listen", "0.0.0.0:0", "--read-only"}, "set a token"},
		{[]string{"--listen", ":0", "--basic-auth", "ops:pa55word"}, "--behind-tls-proxy"},
	} {
		r := runWarren(t, nil, append([]string{"console"}, c.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "serving") {
			t.Errorf("console %v: exit %d, want 1 and %q\nstderr: %s", c.args, r.code, c.want, r.stderr)
		}
	}
}
