package fill

import (
	"context"
	"io"
)

// WriterAt is the Copier of a destination in host memory: every lane is
// plain Go buffers, and a copy is a synchronous W.WriteAt at the
// destination offset (a file of shared memory, a memfd, an in-memory
// test buffer). A nil W copies nothing, which times the readers alone.
// W must accept concurrent WriteAt calls of disjoint ranges, as an
// *os.File does.
type WriterAt struct{ W io.WriterAt }

// Acquire returns a lane of buffers fresh buffers of size bytes.
func (c WriterAt) Acquire(_ context.Context, buffers, size int) (Lane, error) {
	l := &writerAtLane{w: c.W, bufs: make([][]byte, buffers)}
	for i := range l.bufs {
		l.bufs[i] = make([]byte, size)
	}
	return l, nil
}

type writerAtLane struct {
	w    io.WriterAt
	bufs [][]byte
}

func (l *writerAtLane) Buffer(i int) []byte { return l.bufs[i] }

func (l *writerAtLane) CopyAsync(i, off, n int, dst uint64) (Completion, error) {
	if l.w == nil {
		return Done(nil), nil
	}
	_, err := l.w.WriteAt(l.bufs[i][off:off+n], int64(dst))
	return Done(err), nil
}

func (l *writerAtLane) Release(error) {}
