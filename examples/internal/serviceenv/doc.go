// Package serviceenv reads the environment the example services
// (examples/webhook/cmd/webhook, examples/automation/cmd/automation) share:
// one reading of the consumer's variables, so the two binaries cannot
// drift apart in what they accept.
package serviceenv
