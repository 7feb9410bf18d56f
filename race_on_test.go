//go:build race

package warren_test

// raceEnabled: the race detector's instrumentation moves values to the
// heap, so allocation counts are asserted only in a normal build.
const raceEnabled = true
