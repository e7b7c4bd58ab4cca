package childproc

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writers and readers: the
// output of a child process or of a logger whose goroutines write while the
// test reads. The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
