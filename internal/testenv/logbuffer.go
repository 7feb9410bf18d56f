package testenv

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer is what a logger under test wrote, safe to read while it
// writes: give it to slog.NewTextHandler and wait for a line with Has.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Has reports whether s was written.
func (b *LogBuffer) Has(s string) bool { return strings.Contains(b.String(), s) }
