//go:build race

package main

// raceEnabled is set when the tests run with the race detector, whose
// shadow memory a measurement of peak memory would count.
const raceEnabled = true
