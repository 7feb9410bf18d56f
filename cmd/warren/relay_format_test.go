package main

import (
	"io"
	"testing"

	"github.com/warrenmq/warren"
)

// --format and the publisher flags reach the relay's config, the
// environment fills what the flags leave out, and an unknown format is a
// usage error before anything connects.
func TestRelayRunFormatFlags(t *testing.T) {
	environ := map[string]string{"WARREN_FORMAT": "warren", "WARREN_SOURCE": "from-env", "DATABASE_URL": "postgres://127.0.0.1:1/none"}
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return environ[k] }}
	p, err := relayVerbs.parse(env, []string{"run", "--format", "plane", "--publisher", "billing", "--publisher-instance", "pod-3", "--envelope-version", "1.1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.opts.config(env)
	want := warren.Publisher{Name: "billing", Instance: "pod-3", Version: "1.1", Source: "from-env"}
	if cfg.Format != warren.FormatPlane || cfg.Publisher != want {
		t.Errorf("format %q publisher %+v, want plane %+v", cfg.Format, cfg.Publisher, want)
	}

	environ["WARREN_FORMAT"] = "kafka"
	code := run(t.Context(), env, []string{"relay", "run"})
	if code != 2 {
		t.Errorf("unknown format: exit %d, want 2 (usage)", code)
	}
}
