package relay_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/warrenmq/warren/relay"
)

// A relay runs in process until the program is interrupted.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := relay.New(relay.Config{
		DatabaseURL: os.Getenv("DATABASE_URL"),
		AMQPURL:     os.Getenv("AMQP_URL"),
		Exchange:    "warren.events",
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
