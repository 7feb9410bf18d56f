package warren_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The ADR index lists every record under its number, once, and every
// link to a record anywhere in the repository names a file that exists:
// records are renumbered never, but a rename must not leave a dead link.
func TestADRIndexAndLinks(t *testing.T) {
	entries, err := os.ReadDir("docs/adr")
	if err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile("docs/adr/README.md")
	if err != nil {
		t.Fatal(err)
	}
	numbered := regexp.MustCompile(`^(\d{3})-[a-z0-9-]+\.md$`)
	seen := map[string]string{}
	for _, e := range entries {
		if e.Name() == "README.md" {
			continue
		}
		m := numbered.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("docs/adr/%s: a record's name is NNN-words.md", e.Name())
			continue
		}
		if other, ok := seen[m[1]]; ok {
			t.Errorf("docs/adr: %s and %s share the number %s", other, e.Name(), m[1])
		}
		seen[m[1]] = e.Name()
		if n := strings.Count(string(index), "("+e.Name()+")"); n != 1 {
			t.Errorf("docs/adr/README.md links %s %d times, want once", e.Name(), n)
		}
	}

	link := regexp.MustCompile(`adr/([A-Za-z0-9._-]+\.md)`)
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			if _, err := os.Stat(filepath.Join("docs/adr", m[1])); err != nil {
				t.Errorf("%s links docs/adr/%s, which does not exist", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
