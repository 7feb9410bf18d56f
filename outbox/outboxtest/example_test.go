package outboxtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/outboxtest"
)

// closeIssue is the code under test: it changes an issue and writes the
// event that says so, in the caller's transaction.
func closeIssue(ctx context.Context, tx pgx.Tx, ob *outbox.Table, issueID string) error {
	// (the business write, UPDATE issues …, would go here)
	_, err := ob.Publish(ctx, tx, warren.Event{
		ID: "close-" + issueID, Type: "issue.closed", EntityType: "issue", EntityID: issueID,
		InitiatorType: warren.InitiatorUser,
		Payload:       warren.Payload{Data: json.RawMessage(`{"state":"closed"}`)},
	})
	return err
}

// A test runs the code under test in a transaction, asserts on the outbox
// inside it, and rolls back, so nothing is ever relayed.
func ExampleRequireEvent() {
	ctx := context.Background()
	pool, ob, cleanup := exampleSetup(ctx)
	defer cleanup()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // the test writes nothing that outlives it

	if err := closeIssue(ctx, tx, ob, "iss-7"); err != nil {
		log.Fatal(err)
	}
	var t testing.TB = reportT{} // in a test: the test's *testing.T
	ev := outboxtest.RequireEvent(ctx, t, tx, outboxtest.Match{Type: "issue.closed", EntityID: "iss-7", Table: ob})
	fmt.Println(ev.ID, string(ev.Payload.Data))

	// What a test that expected an event the code did not write is told:
	outboxtest.RequireEvent(ctx, t, tx, outboxtest.Match{Type: "issue.reopened", Table: ob})
	// Output:
	// close-iss-7 {"state": "closed"}
	// FAIL: outboxtest: want one outbox event with event_type="issue.reopened", found 0 among 1: close-iss-7 issue.closed issue/iss-7
}

// Events lists what the transaction wrote, for assertions of any shape.
func ExampleEvents() {
	ctx := context.Background()
	pool, ob, cleanup := exampleSetup(ctx)
	defer cleanup()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, id := range []string{"iss-1", "iss-2"} {
		if err := closeIssue(ctx, tx, ob, id); err != nil {
			log.Fatal(err)
		}
	}
	evs, err := outboxtest.Events(ctx, tx, ob)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range evs {
		fmt.Println(ev.ID, ev.Type)
	}
	// Output:
	// close-iss-1 issue.closed
	// close-iss-2 issue.closed
}

// reportT stands in for a test's *testing.T in the example: it prints what
// a failing test would report instead of failing.
type reportT struct{ testing.TB }

func (reportT) Helper()                           {}
func (reportT) Fatalf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }

// exampleSetup migrates an outbox table of the example's own, dropped by
// cleanup.
func exampleSetup(ctx context.Context) (*pgxpool.Pool, *outbox.Table, func()) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(fmt.Sprintf("outboxtest_example_%d", os.Getpid()))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := ob.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	return pool, ob, func() {
		name := pgx.Identifier{ob.Name()}.Sanitize()
		migrations := pgx.Identifier{ob.Name() + "_migrations"}.Sanitize()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+name+", "+migrations); err != nil {
			log.Print(err)
		}
		pool.Close()
	}
}
