package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// Review finding 1B. A key the store refuses (it answers, with an error
// that is the key's own) fails its message like any transient failure:
// retried, attempts spent, and dead-lettered as exhausted, while the store
// shows up — it answered. Before the fix every claim error was a store
// outage, so the message was deferred for ever without spending an
// attempt, and kept the consumer unready. Postgres: the table refuses the
// key (a check constraint stands in for any per-key refusal; keys too long
// for the index are hashed by the store and so never refused). Redis: the
// key holds a list (WRONGTYPE).
func TestRefusedKeyIsDeadLetteredNotDeferredForEver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		poison func(t *testing.T, key string) dedup.Store
	}{
		{"postgres", func(t *testing.T, key string) dedup.Store {
			table := testenv.Name(t, "dd")
			testenv.DropTables(t, table)
			pool := testenv.PgPool(t)
			store, err := postgres.New(pool, postgres.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(context.Background(), `ALTER TABLE `+table+` ADD CHECK (key <> $$`+key+`$$)`); err != nil {
				t.Fatal(err)
			}
			return store
		}},
		{"redis", func(t *testing.T, key string) dedup.Store {
			prefix := testenv.Name(t, "dd") + ":"
			testenv.DeleteRedisKeysOnCleanup(t, prefix)
			rdb := testenv.RedisClient(t, testenv.Name(t, "client"))
			if err := rdb.LPush(context.Background(), prefix+"{"+key+"}", "not a lease").Err(); err != nil {
				t.Fatal(err)
			}
			store, err := redis.New(rdb, redis.Config{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return store
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := testenv.Name(t, "evt")
			key := func(m *warren.Message) string { return "poison:" + m.Event.ID }
			store := tc.poison(t, "poison:"+id)
			o := startOutageConsumer(t, store, middleware.DedupOptions{UnavailableDelay: time.Millisecond, Key: key})
			publishEvent(t, o.Config().Exchange, id)
			testenv.WaitFor(t, 60*time.Second, "the message to be dead-lettered, or deferred 10 times", func() bool {
				s := o.Stats()
				return s.DeadLettered == 1 || s.Unavailable >= 10
			})
			s := o.Stats()
			if s.DeadLettered != 1 || s.Unavailable != 0 || s.Retried != uint64(o.Config().MaxAttempts-1) {
				t.Errorf("stats %+v: want the message retried MaxAttempts-1 times, then dead-lettered, never deferred", s)
			}
			if runs := o.attempts(); len(runs) != 0 {
				t.Errorf("the handler ran (attempts %v) for a key the store refused", runs)
			}
			if h := o.Health(); !h.Ready || !h.Dependencies[0].Up {
				t.Errorf("health %+v: a store that answered shows down", h)
			}
		})
	}
}
