package warren_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var updateAPI = flag.Bool("update-api", false, "rewrite docs/api.txt from the public packages' go doc -short")

// The public API grows only on purpose: docs/api.txt records `go doc
// -short` of every public package, and a change to what a package
// exports fails here until the record is rewritten (go test -run
// TestPublicAPIIsRecorded . -update-api) and the change shows in review.
func TestPublicAPIIsRecorded(t *testing.T) {
	list, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var b strings.Builder
	for _, pkg := range strings.Fields(string(list)) {
		if !isPublic(pkg) {
			continue
		}
		out, err := exec.Command("go", "doc", "-short", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go doc -short %s: %v\n%s", pkg, err, out)
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		fmt.Fprintf(&b, "## %s (%d)\n%s\n\n", pkg, len(lines), strings.Join(lines, "\n"))
	}
	got := b.String()
	if *updateAPI {
		if err := os.WriteFile("docs/api.txt", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("docs/api.txt")
	if err != nil {
		t.Fatalf("%v (write it with go test -run TestPublicAPIIsRecorded . -update-api)", err)
	}
	if got != string(want) {
		t.Fatalf("the public API is not docs/api.txt's; if the change is meant, rewrite it with go test -run TestPublicAPIIsRecorded . -update-api\n%s", lineDiff(string(want), got))
	}
}

// isPublic reports whether an importer outside the module can use pkg.
func isPublic(pkg string) bool {
	rel := strings.TrimPrefix(pkg, "github.com/warrenmq/warren")
	for _, private := range []string{"/internal", "/cmd/", "/examples/", "/devtools/"} {
		if strings.Contains(rel+"/", private) {
			return false
		}
	}
	return true
}

// lineDiff lists the lines only one side has.
func lineDiff(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var out []string
	for _, l := range strings.Split(want, "\n") {
		if g[l] < w[l] {
			out = append(out, "- "+l)
			w[l]--
		}
	}
	w = count(want)
	for _, l := range strings.Split(got, "\n") {
		if w[l] < g[l] {
			out = append(out, "+ "+l)
			g[l]--
		}
	}
	return strings.Join(out, "\n")
}
