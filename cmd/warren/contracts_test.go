package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/warrenmq/warren/contract"
)

// warren contracts check fails a change that breaks compatibility, names
// the contract and the field, and passes one that does not.
func TestContractsCheck(t *testing.T) {
	t.Parallel()
	type v1 struct {
		Name string `json:"name"`
	}
	type v1Required struct {
		Name     string `json:"name"`
		Priority string `json:"priority"`
	}
	type v1Optional struct {
		Name     string `json:"name"`
		Priority string `json:"priority,omitempty"`
	}
	write := func(cs ...contract.Contract) string {
		dir := t.TempDir()
		s, err := contract.NewSet(cs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteDir(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	main := write(contract.MustOf[v1]("workitem.updated", "1.0"))
	required := write(contract.MustOf[v1Required]("workitem.updated", "1.0"))
	optional := write(contract.MustOf[v1Optional]("workitem.updated", "1.0"))
	call := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), &cliEnv{stdout: &out, stderr: &errOut, getenv: os.Getenv}, append([]string{"contracts", "check"}, args...))
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := call(main, required); code != 1 ||
		!strings.Contains(out, "BREAK workitem.updated@1.0: payload.data.priority: the reader requires priority") ||
		!strings.Contains(errOut, "1 breaking changes under backward") {
		t.Errorf("a required field added, backward: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := call("--mode", "forward", main, required); code != 0 || !strings.Contains(out, "0 breaking changes") {
		t.Errorf("a required field added, forward: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := call("--mode", "full", main, optional); code != 0 {
		t.Errorf("an optional field added, full: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := call("--mode", "sideways", main, optional); code != 2 || !strings.Contains(errOut, "want backward, forward or full") {
		t.Errorf("a wrong mode: exit %d, %s", code, errOut)
	}
	if code, _, errOut := call(main); code != 2 || !strings.Contains(errOut, "want two directories") {
		t.Errorf("one directory: exit %d, %s", code, errOut)
	}
	if code, _, errOut := call(main, t.TempDir()+"/missing"); code != 1 || !strings.Contains(errOut, "the changed contracts") {
		t.Errorf("a missing directory: exit %d, %s", code, errOut)
	}
	// The change that adds the first contracts: main has no directory.
	if code, out, errOut := call(t.TempDir()+"/none-yet", required); code != 0 || !strings.Contains(out, "no contracts before this change") {
		t.Errorf("no contracts before: exit %d\n%s%s", code, out, errOut)
	}
}
