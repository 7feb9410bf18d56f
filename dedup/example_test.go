package dedup_test

import (
	"context"
	"fmt"
	"time"

	"github.com/warrenmq/warren/dedup/memory"
)

// The lease contract, step by step: the first claim acquires, a concurrent
// one finds the key busy, and after Complete every claim finds it done.
// middleware.Dedup does this for each message.
func Example() {
	ctx := context.Background()
	store := memory.New(memory.Config{Retention: 7 * 24 * time.Hour})

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
