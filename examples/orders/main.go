// Command orders is a whole warren service in one file, for a team with a
// Postgres database and a RabbitMQ broker: an order and its event commit
// in one transaction, a relay in the same process publishes the event, and
// a consumer handles each event once, by prefix, deduplicated in Redis.
//
//	scripts/services.sh && go run ./examples/orders
//
// DATABASE_URL, AMQP_URL and REDIS_URL point it elsewhere. It places an
// order at start, logs the receipt its consumer sends, and runs until
// interrupted.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	svc := service{
		DatabaseURL: cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test"),
		AMQPURL:     cmp.Or(os.Getenv("AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/"),
		RedisURL:    cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"),
		Orders:      "orders", Outbox: "orders_outbox", Exchange: "orders.events", Consumer: "orders-mailer",
		Sent: func(order string) { log.Printf("receipt for order %s sent", order) },
	}
	order := "order-" + rand.Text()[:8] // a new order each run
	if err := svc.run(ctx, order, 4200); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
