package dedup_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/memory"
)

// The lease contract, step by step: the first claim acquires, a concurrent
// one finds the key busy, and after Complete every claim finds it done.
// middleware.Dedup does this for each message.
func Example() {
	ctx := context.Background()
	store, err := memory.New(memory.Config{Retention: 7 * 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}

	first, _ := store.Claim(ctx, "webhook:evt-1", time.Minute)
	second, _ := store.Claim(ctx, "webhook:evt-1", time.Minute)
	fmt.Println(first.Result, second.Result)

	_ = store.Complete(ctx, first) // after the handler succeeded; Release after it failed
	third, _ := store.Claim(ctx, "webhook:evt-1", time.Minute)
	other, _ := store.Claim(ctx, "automation:evt-1", time.Minute) // another consumer's key
	fmt.Println(third.Result, other.Result)
	// Output:
	// acquired busy
	// done acquired
}

func ExampleKey() {
	fmt.Println(dedup.Key("webhook", "5b0e8a7e"))
	// A ':' in the namespace cannot be confused with the separator.
	fmt.Println(dedup.Key("billing:eu", "42"))
	fmt.Println(dedup.Key("billing", "eu:42"))
	// Output:
	// webhook:5b0e8a7e
	// billing\:eu:42
	// billing:eu:42
}
