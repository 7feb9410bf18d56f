package warren

import (
	"sync"
	"time"
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
// A Dependency is safe for concurrent use. Make one with [NewDependency].
type Dependency struct {
	name string

	mu        sync.Mutex
	downSince time.Time // zero while up
	err       error     // the latest failure while down
}

// NewDependency returns a dependency named name ("dedup", say), up until a
// call to it fails.
func NewDependency(name string) *Dependency { return &Dependency{name: name} }

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
	if d.downSince.IsZero() {
		d.downSince = time.Now()
	}
	d.err = err
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
	st := DependencyState{Name: d.name, Up: d.downSince.IsZero(), DownSince: d.downSince}
	if d.err != nil {
		st.Error = d.err.Error()
	}
	return st
}
