package redis_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
)

// The reply to a claim's script is lost after Redis ran it (the key now
// holds the claim's token) and go-redis sends the same script, with the
// same token, again. The retry must find its own lease and report it
// acquired: answering busy would leave a lease nobody holds, and every
// delivery of the event would be deferred until it expired.
func TestClaimRetriedAfterALostReplyIsAcquired(t *testing.T) {
	t.Parallel()
	opts, err := goredis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartLostReply(t, opts.Addr, sendsScript, scriptReplyArrived)
	opts.Addr = proxy.Addr()
	opts.ClientName = testenv.Name(t, "cli")
	opts.MaxRetries = 3 // go-redis's default, stated because the test relies on the retry
	proxied := goredis.NewClient(opts)
	t.Cleanup(func() { proxied.Close() })

	prefix := testenv.Name(t, "dd") + ":"
	testenv.DeleteRedisKeysOnCleanup(t, prefix)
	s, err := redis.New(proxied, redis.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := s.Claim(ctx, "evt-1", 30*time.Second)
	if !proxy.Lost() {
		t.Fatal("the proxy lost no reply; the test proved nothing")
	}
	if err != nil {
		t.Fatalf("Claim after a lost reply: %v (go-redis should have retried)", err)
	}
	if c.Result != dedup.Acquired {
		t.Fatalf("Claim after a lost reply = %v; want acquired: the first run of the script took the lease with this claim's token", c.Result)
	}

	// The lease is really this claim's: Redis holds its token, it completes,
	// and another claimer then sees the key done.
	direct, _ := newStore(t, "dedup-lostreply", redis.Config{Prefix: prefix})
	if v := testenv.RedisClient(t, "dedup-lostreply-check").Get(ctx, prefix+"{evt-1}").Val(); v != c.Token {
		t.Fatalf("key holds %q, want the claim's token %q", v, c.Token)
	}
	if err := s.Complete(ctx, c); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if other, err := direct.Claim(ctx, "evt-1", time.Second); err != nil || other.Result != dedup.Done {
		t.Fatalf("claim after completion = %+v, %v; want done", other, err)
	}
}

// sendsScript matches a request that runs a script (EVALSHA, or EVAL after
// Redis did not know the script yet).
func sendsScript(sent []byte) bool {
	return bytes.Contains(bytes.ToLower(sent), []byte("\r\neval"))
}

// scriptReplyArrived loses the first reply to a script that ran. A
// NOSCRIPT error means it did not run: go-redis then sends EVAL, whose
// reply is the one to lose.
func scriptReplyArrived(withheld []byte) (pass int, lose bool) {
	const noScript = "-NOSCRIPT"
	switch {
	case len(withheld) < len(noScript) && bytes.HasPrefix([]byte(noScript), withheld):
		return 0, false // too short to tell
	case bytes.HasPrefix(withheld, []byte(noScript)):
		if end := bytes.Index(withheld, []byte("\r\n")); end >= 0 {
			return end + 2, false
		}
		return 0, false
	}
	return 0, true
}
