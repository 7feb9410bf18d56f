package dlqtool

import "time"

// SetIdleWait sets how long a scan waits for a delivery before it asks the
// broker what is left, and returns a function that restores it. Tests of
// this package do not run in parallel, so changing it is safe.
func SetIdleWait(d time.Duration) (restore func()) {
	old := idleWait
	idleWait = d
	return func() { idleWait = old }
}
