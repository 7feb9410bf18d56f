// Package archivefile opens the files warren writes a copy of data into
// before deleting that data: `warren dlq purge --archive`, `warren outbox
// purge --archive` and the console's purge.
//
// Such a file is safe only once its content and its name are both on
// stable storage. fsync of the file covers the content; the name lives in
// the directory, which a crash can roll back to before the file existed
// unless the directory is synced too. [File.Sync] does both, so a caller
// that deletes only after Sync returned nil never deletes what a crash
// could take back.
package archivefile

import (
	"fmt"
	"os"
	"path/filepath"
)

// File is an archive file. Its Sync syncs the file, and its directory the
// first time.
type File struct {
	*os.File
	dirSynced bool
}

// Create creates path, which must not exist (an earlier archive is never
// overwritten or appended to), readable by its owner only: dead letters
// and outbox rows may hold personal data.
func Create(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return &File{File: f}, nil
}

// Append opens path for appending, creating it (owner only) if needed.
func Append(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &File{File: f}, nil
}

// Sync returns nil once everything written to f, and f's name in its
// directory, are on stable storage.
func (f *File) Sync() error {
	if err := f.File.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if f.dirSynced {
		return nil
	}
	dir, err := os.Open(filepath.Dir(f.Name()))
	if err != nil {
		return fmt.Errorf("sync the directory of %s: %w", f.Name(), err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("sync the directory of %s: %w", f.Name(), err)
	}
	f.dirSynced = true
	return nil
}
