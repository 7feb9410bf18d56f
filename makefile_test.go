package warren_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// vulncheck runs `make vulncheck` with only the commands in bin on PATH,
// and env added to the environment.
func vulncheck(t *testing.T, bin string, env ...string) (string, error) {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not installed")
	}
	cmd := exec.Command(mk, "-s", "vulncheck")
	cmd.Env = append(os.Environ(), append([]string{"PATH=" + bin}, env...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Without curl, vulncheck cannot probe the database: it says so, rather
// than calling the database unreachable, and passes like offline.
func TestVulncheckWithoutCurl(t *testing.T) {
	out, err := vulncheck(t, t.TempDir())
	if err != nil || !strings.Contains(out, "curl not found") {
		t.Errorf("make vulncheck without curl: %v, output %q; want it to pass saying curl was not found", err, out)
	}
}

// Once the database answers, a pinned govulncheck that the module proxy
// cannot serve fails lint, with a line that says so.
func TestVulncheckFailsWhenTheToolCannotBeFetched(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "curl"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	goCmd, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(goCmd, filepath.Join(bin, "go")); err != nil {
		t.Fatal(err)
	}
	out, err := vulncheck(t, bin, "GOPROXY=off", "GOMODCACHE="+t.TempDir(), "GOFLAGS=-modcacherw")
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || !strings.Contains(out, "cannot be fetched") {
		t.Errorf("make vulncheck with an unreachable proxy: %v, output %q; want it to fail saying the tool cannot be fetched", err, out)
	}
}
