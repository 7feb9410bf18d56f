package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// scriptCall is one run of a store script on one key, waiting for its
// batch; sendPipeline fills in res and err.
type scriptCall struct {
	script *goredis.Script
	key    string
	args   []any

	res int64
	err error
}

// run runs script on key in the next pipeline, or, with batching off, at
// once on its own, and returns its integer answer.
func (s *Store) run(ctx context.Context, script *goredis.Script, key string, args ...any) (int64, error) {
	if s.batcher == nil {
		return script.Run(ctx, s.client, []string{key}, args...).Int64()
	}
	c := &scriptCall{script: script, key: key, args: args}
	if err := s.batcher.Do(ctx, c); err != nil {
		return 0, err
	}
	return c.res, c.err
}

// releaseOfAbandoned is coalesce.Undo's undo for the calls whose callers
// stopped waiting: the release of the lease a claim may have taken, one
// that was acquired or whose reply was lost. Kept, such a lease would hold
// every delivery of its key off until it ran out, though nobody will
// complete it.
func releaseOfAbandoned(c *scriptCall) (*scriptCall, bool) {
	if c.script != claimScript || !(c.res == claimAcquired || c.err != nil) {
		return nil, false
	}
	return &scriptCall{script: releaseScript, key: c.key, args: c.args[:1]}, true // args[0] is the token
}

// sendPipeline runs a batch of script calls in one pipeline. Each script
// is atomic on its own key and each call gets its own reply, so one call's
// error (a key holding another type, say) fails that call alone; only a
// failure of the connection fails them all, as it would have failed each
// of them sent alone. go-redis resends the pipeline after a network error,
// which every script tolerates: each answers a repeat of its own call as
// it answered the first.
func (s *Store) sendPipeline(ctx context.Context, calls []*scriptCall) {
	cmds := s.pipeline(ctx, calls, (*goredis.Script).EvalSha)
	var missing []*scriptCall // the server's script cache did not hold the script
	for i, c := range calls {
		if goredis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			missing = append(missing, c)
			continue
		}
		c.res, c.err = cmds[i].Int64()
	}
	if len(missing) == 0 {
		return
	}
	// A NOSCRIPT reply means the script did not run: sending its source
	// now (which also caches it) runs it once.
	for i, cmd := range s.pipeline(ctx, missing, (*goredis.Script).Eval) {
		missing[i].res, missing[i].err = cmd.Int64()
	}
}

type evalFunc func(s *goredis.Script, ctx context.Context, c goredis.Scripter, keys []string, args ...any) *goredis.Cmd

func (s *Store) pipeline(ctx context.Context, calls []*scriptCall, eval evalFunc) []*goredis.Cmd {
	pipe := s.client.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = eval(c.script, ctx, pipe, []string{c.key}, c.args...)
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	return cmds
}
