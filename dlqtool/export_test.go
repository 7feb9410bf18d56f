package dlqtool

import "time"

// SetIdleWait sets how long a scan waits for a delivery before it asks the
// broker what is left, and returns a function that restores it. The tests
// that call it stay serial: every scan of the parallel ones reads it.
func SetIdleWait(d time.Duration) (restore func()) {
	old := idleWait
	idleWait = d
	return func() { idleWait = old }
}
