package archivefile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warrenmq/warren/cmd/warren/internal/archivefile"
)

func TestCreateRefusesAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	f, err := archivefile.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("one\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := archivefile.Create(path); !os.IsExist(err) {
		t.Fatalf("second Create of %s: %v, want it to exist", path, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", fi.Mode(), err)
	}
}

func TestAppendKeepsWhatIsThere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	for _, line := range []string{"one\n", "two\n"} {
		f, err := archivefile.Append(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" {
		t.Fatalf("file holds %q", b)
	}
}

// A directory that cannot be opened fails Sync: the caller must not
// delete anything then.
func TestSyncFailsWhenTheDirectoryCannotBeSynced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := archivefile.Create(filepath.Join(dir, "a.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err == nil {
		t.Fatal("Sync succeeded with the file's directory gone")
	}
}
