package dedup

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Result is what a claim found.
type Result uint8

const (
	// Acquired: the caller holds the lease and should run the handler.
	Acquired Result = iota + 1
	// Done: the key was completed before and its retention has not ended;
	// the event is a duplicate.
	Done
	// Busy: another claimer holds an unexpired lease; try again later.
	Busy
)

func (r Result) String() string {
	switch r {
	case Acquired:
		return "acquired"
	case Done:
		return "done"
	case Busy:
		return "busy"
	}
	return "unknown"
}

// Claim is the answer to [Store.Claim]. When Result is [Acquired], Token
// proves ownership to Complete and Release.
type Claim struct {
	Key    string
	Token  string
	Result Result
}

// ErrLeaseLost is returned by Complete when another claim holds the key:
// the lease ran out and another claimer took it over.
// A handler whose completion fails this way may have run twice; the store
// did not lose track of the key.
var ErrLeaseLost = errors.New("dedup: lease lost")

// Store hands out leases on keys. Implementations must be safe for
// concurrent use by many goroutines and processes.
//
// Errors: a store marks with [Refused] an error it was answered with that
// belongs to the call (its key, its data), never one that says the store
// cannot serve (a timeout, a lost connection, a server restarting or out
// of connections). Callers retry a refused call's message, spending its
// attempts, and defer every other failure without spending any (see
// [ErrRefused]); an unmarked error is therefore always the safe choice.
type Store interface {
	// Claim tries to take key for lease. It takes over a key whose
	// previous lease has expired without completion. An empty key or a
	// non-positive lease is an error.
	Claim(ctx context.Context, key string, lease time.Duration) (Claim, error)

	// Complete marks the claimed key done; it stays done for the store's
	// retention period. It fails with ErrLeaseLost only when another
	// claim holds the key now: that claim's unexpired lease, or its
	// done-mark within retention. Otherwise it writes the mark — over the
	// claim's own lease, expired or not, and on a key that nobody holds:
	// one whose lease ran out (and was purged or swept since) while nobody
	// else claimed it, or that this claim released. The claim was never
	// contradicted then, and losing its mark would only handle its event
	// again. Completing the same claim again succeeds and changes nothing,
	// so a call retried after a lost reply (clients retry on network
	// errors) does not report a lease it in fact kept as lost.
	Complete(ctx context.Context, c Claim) error

	// Release gives the key up so that the next claim acquires it at
	// once. Releasing a claim that no longer holds the key is not an error
	// and changes nothing; in particular Release never undoes a Complete,
	// so a caller unsure whether its completion landed may release.
	Release(ctx context.Context, c Claim) error
}

// Transactor is implemented by stores that can mark a claim done inside a
// database transaction the handler also writes in (dedup/postgres). With
// it, the handler's writes and the done-mark commit or roll back together,
// so the handler's database effects happen exactly once.
type Transactor interface {
	// WithinTx begins a transaction, calls fn with a context that carries
	// it (the store's package says how to get it out), and when fn returns
	// nil marks c done in the same transaction (as Complete would) and
	// commits. When fn fails, it rolls back and returns fn's error
	// unchanged; when the mark fails (ErrLeaseLost) or the begin or the
	// commit does, it rolls back and returns that error. The store bounds
	// its own statements (the begin, the mark, the commit and a rollback),
	// as only it knows where fn's time ends and its own begins.
	WithinTx(ctx context.Context, c Claim, fn func(ctx context.Context) error) error
}

// Key builds a dedup key from a namespace (a consumer's name) and an id (an
// event's), as "<namespace>:<id>" with any ':' or '\' in the namespace
// escaped by a backslash. Without the escape, consumer "billing:eu" with
// event "42" and consumer "billing" with event "eu:42" would share a key,
// and one consumer's event would be acknowledged as the other's duplicate.
func Key(namespace, id string) string {
	if strings.ContainsAny(namespace, `:\`) {
		namespace = strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(namespace)
	}
	return namespace + ":" + id
}
