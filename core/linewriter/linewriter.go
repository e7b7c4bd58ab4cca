// Package linewriter turns a byte stream (a child process's stdout or
// stderr) into lines: Writer is an io.Writer that accepts any split of the
// stream into Write calls and hands each complete line to a function. The
// launcher forwards its daemons' output with it, pluginhost keeps its
// plugins' last log lines with it.
package linewriter

import (
	"bytes"
	"sync"

	"github.com/wcache/wcache/internal/defaults"
)

// LineFunc receives one line, without its "\n" and any trailing "\r".
// cut is true when the line was longer than the Writer's limit and only
// its first Max bytes are given.
type LineFunc func(line string, cut bool)

// Writer splits what it is given into lines. It is safe for concurrent
// use; the LineFunc is called with the Writer's lock held, one line at a
// time, in stream order, so it must not call back into the Writer.
type Writer struct {
	max  int
	emit LineFunc

	mu      sync.Mutex
	partial []byte
	cut     bool
}

// New returns a Writer that gives every line to emit, cutting lines at
// max bytes (max <= 0: 4096), so that a stream with no newline cannot grow
// memory.
func New(max int, emit LineFunc) *Writer {
	defaults.Positive(&max, 4096)
	return &Writer{max: max, emit: emit}
}

// Write splits p into lines, keeping an unterminated last one for the next
// call. It never fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.appendPartial(p)
			break
		}
		w.appendPartial(p[:i])
		w.emitLocked()
		p = p[i+1:]
	}
	return n, nil
}

func (w *Writer) appendPartial(b []byte) {
	if room := w.max - len(w.partial); len(b) > room {
		b = b[:room]
		w.cut = true
	}
	w.partial = append(w.partial, b...)
}

func (w *Writer) emitLocked() {
	line := string(bytes.TrimRight(w.partial, "\r"))
	cut := w.cut
	w.partial, w.cut = w.partial[:0], false
	w.emit(line, cut)
}

// Flush hands an unterminated last line, if any, to the LineFunc (at the
// end of the stream).
func (w *Writer) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 || w.cut {
		w.emitLocked()
	}
}

// Partial returns the unterminated last line so far (trailing "\r"
// trimmed) without consuming it, and whether it was cut.
func (w *Writer) Partial() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimRight(w.partial, "\r")), w.cut
}
