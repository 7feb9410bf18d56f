package main

import (
	"flag"
	"testing"

	"github.com/warrenmq/warren/contract"
)

var update = flag.Bool("update", false, "rewrite contracts/ from the Go types")

// The contracts in the repository are the ones the Go types give: a change
// to OrderPlaced that changes its contract fails here until
// `go test -update` rewrites contracts/ and the change is reviewed (and CI's
// `warren contracts check` compares it with main's).
func TestContractsAreWritten(t *testing.T) {
	t.Parallel()
	const dir = "contracts"
	if *update {
		if err := Contracts.WriteDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	onDisk, err := contract.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if breaks := contract.Compare(onDisk, Contracts, contract.Full); len(breaks) > 0 {
		t.Fatalf("the Go types changed the contracts; run go test -update and review: %v", breaks)
	}
	for _, c := range onDisk.Contracts() {
		if !Contracts.Has(c.Type, c.Version) {
			t.Errorf("%s holds %s@%s, which no Go type gives; run go test -update", dir, c.Type, c.Version)
		}
	}
	for _, c := range Contracts.Contracts() {
		if !onDisk.Has(c.Type, c.Version) {
			t.Errorf("%s lacks %s@%s; run go test -update", dir, c.Type, c.Version)
		}
	}
}
