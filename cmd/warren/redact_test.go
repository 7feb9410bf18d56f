package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A broker URL whose password does not parse (an unescaped '%' or '#') is
// refused by `warren dlq` and `warren relay run` with an error that names
// the URL, and neither the error nor anything else they print reveals the
// password or the pieces of it that net/url quotes. The relay runs on a
// real outbox table, so that without the check it would go on to dial.
func TestUnparsableAMQPURLNeverPrintsThePassword(t *testing.T) {
	t.Parallel()
	environ, _, _ := outboxCLITable(t)
	for _, tc := range []struct{ url, secret, piece, shown string }{
		{"amqp://guest:50%off@127.0.0.1:5672/", "50%off", "%of", ":xxxxx@127.0.0.1:5672/"},
		{"amqp://guest:Hunter2#x@127.0.0.1:5672/", "Hunter2#x", "Hunter2", ":xxxxx@127.0.0.1:5672/"},
		// A cluster's nodes: the second URL's password is as secret.
		{"amqp://guest:guest@127.0.0.1:5672/,amqp://guest:Tw0%zz@127.0.0.1:5673/", "Tw0%zz", "%zz", ":xxxxx@127.0.0.1:5673/"},
	} {
		for _, args := range [][]string{
			{"dlq", "stats", "--queue", "any.dlq", "--amqp-url", tc.url},
			{"relay", "run", "--amqp-url", tc.url},
		} {
			// Bounded: a relay that took the URL would retry the dial
			// until the context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			r := runOutboxCLI(ctx, environ, args...)
			cancel()
			out := r.stdout + r.stderr
			if r.code == 0 || !strings.Contains(out, tc.shown) {
				t.Errorf("warren %s: exit %d, want a failure naming the redacted URL:\n%s", strings.Join(args[:2], " "), r.code, out)
			}
			if strings.Contains(out, tc.secret) || strings.Contains(out, tc.piece) {
				t.Errorf("warren %s reveals the password %q:\n%s", strings.Join(args[:2], " "), tc.secret, out)
			}
		}
	}
}
