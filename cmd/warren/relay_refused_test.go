package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// migratedTable is a fresh outbox table, migrated, dropped after t; with
// mode cdc its slot is dropped after t too.
func migratedTable(t *testing.T, mode string) string {
	t.Helper()
	table := testenv.Name(t, "ob")
	testenv.DropTables(t, table, table+"_migrations")
	pool := testenv.PgPool(t)
	ob, err := outbox.New(table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	if mode == "cdc" {
		testenv.CDCSlot(t, pool, table)
	}
	return table
}

// 'warren relay run' against a broker that refuses its password or its
// vhost exits 1 at once, saying what to fix and not the password, in both
// modes, instead of retrying forever as if the broker were down.
func TestRelayRunRefusedByBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode, url, want string
	}{
		{"password", "poll", testenv.AMQPURLWith(t, "wrong-secret", ""), "RabbitMQ refused the credentials for user guest at amqp://guest:xxxxx@"},
		{"vhost", "poll", testenv.AMQPURLWith(t, "", testenv.Name(t, "novhost")), "does not exist or user guest has no access to it"},
		{"cdc-password", "cdc", testenv.AMQPURLWith(t, "wrong-secret", ""), "RabbitMQ refused the credentials for user guest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			table := migratedTable(t, tc.mode)
			cmd := warrenCmd(t, nil, "relay", "run", "--mode", tc.mode, "--amqp-url", tc.url)
			cmd.Env = append(cmd.Env, "DATABASE_URL="+testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE="+table)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			cmd.Run()
			took := time.Since(start)
			if code := cmd.ProcessState.ExitCode(); code != 1 || took > 60*time.Second {
				t.Fatalf("exit %d after %v, want 1 within a minute\n%s%s", code, took, stdout.String(), stderr.String())
			}
			last := strings.TrimSpace(stderr.String())
			last = last[strings.LastIndex(last, "\n")+1:]
			if !strings.HasPrefix(last, "warren relay: ") || !strings.Contains(last, tc.want) {
				t.Errorf("last line %q: want warren relay: ...%s...", last, tc.want)
			}
			if strings.Contains(stdout.String()+stderr.String(), "wrong-secret") {
				t.Errorf("the password was printed:\n%s%s", stdout.String(), stderr.String())
			}
		})
	}
}

// 'warren relay run' logs at start which broker and database it uses,
// passwords masked, in both modes.
func TestRelayRunLogsItsTargets(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-db-pw-for-the-test"
	for _, mode := range []string{"poll", "cdc"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			table := migratedTable(t, mode)
			db := strings.Replace(testenv.DatabaseURL(t), "postgres@", "postgres:"+secret+"@", 1)
			if !strings.Contains(db, secret) {
				t.Skipf("cannot put a password into %s", testenv.DatabaseURL(t))
			}
			cmd := warrenCmd(t, nil, "relay", "run", "--mode", mode)
			cmd.Env = append(cmd.Env, "DATABASE_URL="+db, "WARREN_OUTBOX_TABLE="+table)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			sc := bufio.NewScanner(stderr)
			for sc.Scan() && !strings.Contains(sc.Text(), "relay started") {
				log.WriteString(sc.Text() + "\n")
			}
			line := sc.Text()
			cmd.Process.Signal(syscall.SIGTERM)
			io.Copy(io.Discard, stderr)
			cmd.Wait()
			wantDB := strings.Replace(db, secret, "xxxxx", 1)
			if !strings.Contains(line, "amqp_url=amqp://guest:xxxxx@") || !strings.Contains(line, wantDB) || strings.Contains(line, secret) {
				t.Errorf("start line %q: want the broker and the database %s, passwords masked\n%s", line, wantDB, log.String())
			}
		})
	}
}

// 'warren relay run' on an outbox table that does not exist exits 1 at
// once in both modes, saying to migrate, instead of waiting for it.
func TestRelayRunMissingTable(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"poll", "cdc"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			table := testenv.Name(t, "gone")
			if mode == "cdc" {
				testenv.CDCSlot(t, testenv.PgPool(t), table) // dropped after, were it made
			}
			cmd := warrenCmd(t, nil, "relay", "run", "--mode", mode)
			cmd.Env = append(cmd.Env, "DATABASE_URL="+testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE="+table)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Run() // bounded by warrenCmd's two minutes
			last := strings.TrimSpace(stderr.String())
			last = last[strings.LastIndex(last, "\n")+1:]
			if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.HasPrefix(last, "warren relay: ") || !strings.Contains(last, "warren outbox migrate") {
				t.Fatalf("exit %d, last line %q; want 1 and to be told to migrate\n%s%s", code, last, stdout.String(), stderr.String())
			}
		})
	}
}
