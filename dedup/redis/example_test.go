package redis_test

import (
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/middleware"
)

func ExampleNew() {
	client := goredis.NewUniversalClient(&goredis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	defer client.Close()
	store, err := redis.New(client, redis.Config{Prefix: "webhook:dedup:", Retention: 3 * 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	_ = middleware.Dedup(store, middleware.DedupOptions{Lease: time.Minute})
}
