// Package browsertest drives Debian's Chromium, headless, from Go tests
// (through chromedp and the DevTools protocol), for the tests of the pages
// `warren console` serves. It is a module of its own, with those tests, so
// that the library's go.mod does not carry chromedp into every importer's
// module graph: `make test` runs it.
//
// Chromium is not on a fresh machine: scripts/services.sh installs it, and
// [New] fails the test with that command when it is missing, like every
// other service a test needs.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/warrenmq/warren/internal/testenv"
)

// Path is where Debian's package puts Chromium.
const Path = "/usr/bin/chromium"

// New starts a headless Chromium with a fresh profile for t and returns a
// context for chromedp.Do and chromedp.Run on its first tab. The browser ends when t does.
// Every action on the context is bounded by timeout, so a page that never
// loads fails the test instead of hanging it.
func New(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	testenv.RequireServices(t, "Chromium")
	path := Path
	if p, err := exec.LookPath(path); err != nil {
		t.Fatalf("Chromium is not installed at %s (%v)\ninstall it with: %s", path, err, testenv.StartCommand)
	} else {
		path = p
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.NoSandbox, // tests run as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		// The machine's network is closed: without these Chromium keeps
		// dialling Google's services, and some of its waits stall on it.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1280, 900),
	)
	if os.Getenv("WARREN_BROWSER_HEADFUL") != "" {
		opts = append(opts, chromedp.Flag("headless", false))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	// The first Run starts the browser; a start that fails is reported
	// here, not inside the test's first action.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start Chromium (%s): %v\ninstall it with: %s", path, err, testenv.StartCommand)
	}
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancel)
	return ctx
}

// Screenshot saves a PNG of the whole page to path (directories made as
// needed), for docs and for looking at a failure.
func Screenshot(t testing.TB, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100) /* 100: PNG; lower is JPEG */)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
