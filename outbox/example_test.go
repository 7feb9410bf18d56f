package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox"
)

// A producer writes the business change and its event in one transaction.
func ExamplePublish() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE issues SET state = 'done' WHERE id = $1`, "iss-1"); err != nil {
		log.Fatal(err)
	}
	_, err = outbox.Publish(ctx, tx, warren.Event{
		ID:            "0190a6f2-8c1e-7d4a-9b1e-3f6c2d8e4a10",
		Type:          "workitem.updated",
		EntityType:    "issue",
		EntityID:      "iss-1",
		InitiatorType: warren.InitiatorUser,
		Payload: warren.Payload{
			Data:               json.RawMessage(`{"state":"done"}`),
			PreviousAttributes: json.RawMessage(`{"state":"in_progress"}`),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Both rows, or neither.
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// Table names are checked before they reach SQL.
func ExampleNew() {
	ob, err := outbox.New("orders_outbox")
	fmt.Println(ob.Name(), ob.Channel(), err)
	_, err = outbox.New(`orders"; DROP TABLE orders; --`)
	fmt.Println(err != nil)
	// Output:
	// orders_outbox warren.orders_outbox <nil>
	// true
}

// Purge keeps a week of delivered and dead rows, archiving what it deletes.
func ExampleTable_Purge() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ob, err := outbox.New("")
	if err != nil {
		log.Fatal(err)
	}
	archive, err := os.OpenFile("outbox-archive.jsonl", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	defer archive.Close()
	n, err := ob.Purge(ctx, pool, outbox.PurgeOptions{
		Before: time.Now().Add(-7 * 24 * time.Hour),
		Archive: func(_ context.Context, rows []outbox.Row) error {
			enc := json.NewEncoder(archive)
			for _, r := range rows {
				if err := enc.Encode(r.Event); err != nil {
					return err
				}
			}
			return archive.Sync() // durable before the rows are deleted
		},
	})
	fmt.Println(n, err)
}
