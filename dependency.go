package warren

import (
	"sync"
	"time"

	"github.com/warrenmq/warren/internal/redact"
)

// Dependency is the state of a service that middleware calls for every
// message (a dedup store), as its latest call found it. The middleware
// reports the result of each call ([Dependency.Report]); a consumer that
// lists the Dependency in consumer.Config.Dependencies shows its state in
// its health and is not ready while it is down.
//
// It is readiness, never liveness: restarting the process does not bring
// a store back, and meanwhile the messages that need it are deferred
// without spending attempts ([Unavailable]), not lost.
//
// A down state lasts only as long as failures keep being reported: it
// lapses, and the dependency counts as up again, once no failure has been
// reported for the lapse ([DefaultDependencyLapse], [Dependency.SetLapse]).
// Calls are made only for messages, so in a quiet period nothing would
// otherwise clear a failure that a store long since recovered from, and
// the consumer would stay unready though nothing waits for the store;
// while messages do wait for it, they come back every UnavailableDelay and
// report again.
//
// A Dependency is safe for concurrent use. Make one with [NewDependency].
type Dependency struct {
	name string

	mu          sync.Mutex
	lapse       time.Duration
	downSince   time.Time // zero while up
	lastFailure time.Time
	err         error // the latest failure while down
}

// DefaultDependencyLapse is how long a [Dependency] stays down after the
// latest failure reported to it, unless [Dependency.SetLapse] says
// otherwise.
const DefaultDependencyLapse = time.Minute

// NewDependency returns a dependency named name ("dedup", say), up until a
// call to it fails.
func NewDependency(name string) *Dependency {
	return &Dependency{name: name, lapse: DefaultDependencyLapse}
}

// SetLapse sets how long the dependency stays down after the latest
// failure reported to it, and returns it. It must be longer than the
// longest wait of a message deferred for the dependency (its
// UnavailableDelay, rounded up to a retry tier), or the dependency shows up
// between two failures of one outage. It panics if lapse is not positive.
func (d *Dependency) SetLapse(lapse time.Duration) *Dependency {
	if lapse <= 0 {
		panic("warren: Dependency.SetLapse: lapse must be positive")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lapse = lapse
	return d
}

// Name returns the dependency's name.
func (d *Dependency) Name() string { return d.name }

// Report records the result of a call to the dependency: nil, it answered
// (whatever the answer); an error, it could not be reached or did not
// answer in time. A failure of the caller's own making (its context
// cancelled by a shutdown) says nothing about the dependency and should
// not be reported.
func (d *Dependency) Report(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		d.downSince, d.err = time.Time{}, nil
		return
	}
	now := time.Now()
	if d.downSince.IsZero() || d.lapsed(now) {
		d.downSince = now
	}
	d.lastFailure, d.err = now, err
}

// lapsed reports whether a down state has outlived its latest failure.
// d.mu must be held.
func (d *Dependency) lapsed(now time.Time) bool {
	return now.Sub(d.lastFailure) >= d.lapse
}

// DependencyState is a [Dependency]'s state at one moment.
type DependencyState struct {
	Name string `json:"name"`
	Up   bool   `json:"up"`
	// DownSince is when the first of the failures running up to now
	// happened; zero while up.
	DownSince time.Time `json:"down_since,omitzero"`
	// Error is the latest failure's text while down.
	Error string `json:"error,omitempty"`
}

// State returns the dependency's current state.
func (d *Dependency) State() DependencyState {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.downSince.IsZero() || d.lapsed(time.Now()) {
		return DependencyState{Name: d.name, Up: true}
	}
	return DependencyState{Name: d.name, DownSince: d.downSince, Error: redact.Secrets(d.err.Error())}
}
