package consumertest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/consumer/consumertest"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// A test built as the service builds its consumer, with Redis dedup, must
// pass on every run, not only the first: each run in a Space of its own
// finds the event new; a run in the space of one before finds it a
// duplicate, which is what -count=2 did without a Space.
func TestSpaceMakesARealStoreRepeatable(t *testing.T) {
	t.Parallel()
	client := testenv.RedisClient(t, testenv.Name(t, "space"))
	var spaces []string
	t.Cleanup(func() {
		ctx := context.Background()
		for _, space := range spaces {
			keys, _ := client.Keys(ctx, space+"*").Result()
			if len(keys) > 0 {
				client.Del(ctx, keys...)
			}
		}
	})
	run := func(space string) consumer.Disposition {
		spaces = append(spaces, space)
		c := newBilling(func(context.Context, *warren.Message) error { return nil })
		store, err := redis.New(client, redis.Config{Prefix: space})
		if err != nil {
			t.Fatal(err)
		}
		c.Use(middleware.Dedup(store, middleware.DedupOptions{}))
		return consumertest.Deliver(context.Background(), c, consumertest.Delivery{Event: invoicePaid}).Disposition
	}
	first, second := consumertest.Space(t), consumertest.Space(t)
	if first == second || !strings.HasSuffix(first, ":") || strings.ContainsAny(first, "{} /") {
		t.Fatalf("spaces %q and %q: want two different names, ending in ':', usable as a Redis prefix", first, second)
	}
	if got := run(first); got != consumer.Done {
		t.Fatalf("first run: %v, want done", got)
	}
	if got := run(second); got != consumer.Done {
		t.Errorf("a second run in a space of its own: %v, want done", got)
	}
	if got := run(first); got != consumer.Duplicate {
		t.Errorf("a run in the first run's space: %v, want duplicate (what a fixed prefix gives under -count=2)", got)
	}
}
