package testenv

import (
	"flag"
	"testing"
)

// ExamplesNeedServices is for the TestMain of a package whose runnable
// examples talk to a service. An example cannot skip itself, and one that
// finds no broker ends the whole test binary; so under -short (the unit
// tier), unless -run was given, only the package's tests and fuzz seeds run (each
// skipping through RequireServices if it needs a service) and its
// examples wait for make test.
func ExamplesNeedServices() {
	if !flag.Parsed() {
		flag.Parse()
	}
	if run := flag.Lookup("test.run"); testing.Short() && run != nil && run.Value.String() == "" {
		if err := run.Value.Set("^(Test|Fuzz)"); err != nil {
			panic(err)
		}
	}
}
