package main

import (
	"io"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox"
)

// --format and the publisher flags reach the relay's config, the
// environment fills what the flags leave out, and an unknown format is a
// usage error before anything connects.
func TestRelayRunFormatFlags(t *testing.T) {
	t.Parallel()
	environ := map[string]string{"WARREN_FORMAT": "warren", "WARREN_SOURCE": "from-env", "DATABASE_URL": "postgres://127.0.0.1:1/none"}
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return environ[k] }}
	p, err := relayVerbs.parse(env, []string{"run", "--format", "plane", "--publisher", "billing", "--publisher-instance", "pod-3", "--envelope-version", "1.1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := p.opts.config(env)
	if err != nil {
		t.Fatal(err)
	}
	want := warren.PublisherInfo{Name: "billing", Instance: "pod-3", Version: "1.1", Source: "from-env"}
	if cfg.Format != warren.FormatPlane || cfg.Publisher != want {
		t.Errorf("format %q publisher %+v, want plane %+v", cfg.Format, cfg.Publisher, want)
	}

	environ["WARREN_FORMAT"] = "kafka"
	code := run(t.Context(), env, []string{"relay", "run"})
	if code != 2 {
		t.Errorf("unknown format: exit %d, want 2 (usage)", code)
	}
}

// --schema (or WARREN_SCHEMA) and --lease reach the relay's config, the
// table defaults to Plane's with the Plane schema, and an unknown schema
// is a usage error before anything connects.
func TestRelayRunSchemaFlags(t *testing.T) {
	t.Parallel()
	environ := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "WARREN_SCHEMA": "plane"}
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return environ[k] }}
	p, err := relayVerbs.parse(env, []string{"run", "--lease", "45s"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := p.opts.config(env)
	if err != nil || cfg.Schema != outbox.SchemaPlane || cfg.Table != outbox.DefaultPlaneTable || cfg.Lease != 45*time.Second {
		t.Errorf("config %q table %q lease %v, %v; want plane, %q, 45s", cfg.Schema, cfg.Table, cfg.Lease, err, outbox.DefaultPlaneTable)
	}
	p, err = relayVerbs.parse(env, []string{"run", "--schema", "warren"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := p.opts.config(env); err != nil || cfg.Schema != outbox.SchemaWarren || cfg.Table != outbox.DefaultTable {
		t.Errorf("--schema warren over WARREN_SCHEMA=plane: %q %q, %v", cfg.Schema, cfg.Table, err)
	}
	environ["WARREN_SCHEMA"] = "mongo"
	if code := run(t.Context(), env, []string{"relay", "run"}); code != 2 {
		t.Errorf("unknown schema: exit %d, want 2 (usage)", code)
	}
	if code := run(t.Context(), env, []string{"outbox", "stats"}); code != 2 {
		t.Errorf("outbox stats with an unknown schema: exit %d, want 2 (usage)", code)
	}
}
