// Command bench measures warren against the bare client libraries doing the
// same work in the same run, and writes the ratios to RESULTS.md.
//
// Every scenario has a raw baseline written with amqp091-go (and, for the
// deduplication and relay scenarios, pgx or go-redis) and a warren variant.
// Variants run alternately for several rounds on equal backlogs; the report
// gives each one's median and spread and the ratio of medians, because
// absolute numbers on a shared machine drift from run to run and ratios
// mostly do not.
//
//	go run . -rounds 5 -out RESULTS.md          all scenarios
//	go run . -run consume -messages 20000       one scenario, smaller
//
// It lives in its own module so its dependencies stay out of warren's.
package main
