package launcher

import (
	"io"
	"sync"

	"github.com/wcache/wcache/core/linewriter"
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
	*linewriter.Writer // splits the stream (Write, Flush) and calls line

	prefix string
	shared *lockedWriter
	tailMu sync.Mutex
	tail   []string
	next   int // ring position of the next line when len(tail) == cap
	keep   int
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
	o := &childOutput{prefix: prefix, shared: shared, keep: keep, tail: make([]string, 0, keep)}
	o.Writer = linewriter.New(maxLineBytes, o.line)
	return o
}

// line forwards one line and remembers it; Write and Flush (of the
// embedded linewriter.Writer) call it.
func (o *childOutput) line(line string, cut bool) {
	if cut {
		line += " …(cut)"
	}
	o.shared.writeLine(o.prefix, line)
	if o.keep <= 0 {
		return
	}
	o.tailMu.Lock()
	defer o.tailMu.Unlock()
	if len(o.tail) < o.keep {
		o.tail = append(o.tail, line)
		return
	}
	o.tail[o.next] = line
	o.next = (o.next + 1) % o.keep
}

// Tail returns the remembered lines, oldest first.
func (o *childOutput) Tail() []string {
	o.tailMu.Lock()
	defer o.tailMu.Unlock()
	out := make([]string, 0, len(o.tail))
	out = append(out, o.tail[o.next:]...)
	return append(out, o.tail[:o.next]...)
}
