//go:build !race

package warren_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
