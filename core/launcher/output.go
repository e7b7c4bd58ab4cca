package launcher

import (
	"bytes"
	"io"
	"sync"
)

// maxLineBytes bounds one remembered or forwarded line; longer lines are cut
// (a daemon printing megabytes without a newline must not grow memory).
const maxLineBytes = 4096

// childOutput receives one child's stdout and stderr. It forwards every
// complete line to a shared writer with a prefix ("[gpu 1 tp 1 pp 0] ") and
// remembers the last lines for failure reports. Lines of different children
// never interleave: the shared writer is guarded by a mutex common to all of
// them.
type childOutput struct {
	prefix string
	shared *lockedWriter

	mu      sync.Mutex
	partial []byte
	cut     bool // the partial line was cut at maxLineBytes
	tail    []string
	next    int // ring position of the next line when len(tail) == cap
	keep    int
}

// lockedWriter serialises whole-line writes of all children.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newLockedWriter(w io.Writer) *lockedWriter {
	if w == nil {
		w = io.Discard
	}
	return &lockedWriter{w: w}
}

func (l *lockedWriter) writeLine(prefix, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Output is best effort: a closed terminal must not fail the daemons.
	_, _ = io.WriteString(l.w, prefix+line+"\n")
}

func newChildOutput(prefix string, shared *lockedWriter, keep int) *childOutput {
	return &childOutput{prefix: prefix, shared: shared, keep: keep, tail: make([]string, 0, keep)}
}

// Write splits p into lines. It never fails.
func (o *childOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			o.appendPartial(p)
			break
		}
		o.appendPartial(p[:i])
		o.emitLocked()
		p = p[i+1:]
	}
	return n, nil
}

func (o *childOutput) appendPartial(b []byte) {
	room := maxLineBytes - len(o.partial)
	if len(b) > room {
		b = b[:room]
		o.cut = true
	}
	o.partial = append(o.partial, b...)
}

func (o *childOutput) emitLocked() {
	line := string(bytes.TrimRight(o.partial, "\r"))
	if o.cut {
		line += " …(cut)"
	}
	o.partial, o.cut = o.partial[:0], false
	o.shared.writeLine(o.prefix, line)
	if o.keep <= 0 {
		return
	}
	if len(o.tail) < o.keep {
		o.tail = append(o.tail, line)
		return
	}
	o.tail[o.next] = line
	o.next = (o.next + 1) % o.keep
}

// Flush emits a final line without a newline, if any.
func (o *childOutput) Flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 || o.cut {
		o.emitLocked()
	}
}

// Tail returns the remembered lines, oldest first.
func (o *childOutput) Tail() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.tail))
	out = append(out, o.tail[o.next:]...)
	return append(out, o.tail[:o.next]...)
}
