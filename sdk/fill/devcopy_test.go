package fill_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/wcache/wcache/sdk/fill"
)

// memCopier copies between two byte slices; failAt (when >= 0) fails the
// copy that covers that offset.
type memCopier struct {
	src, dst []byte
	failAt   int64

	mu       sync.Mutex
	acquired int
	released []error
}

type memStream struct{ c *memCopier }

func (c *memCopier) AcquireStream(ctx context.Context) (fill.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.acquired++
	c.mu.Unlock()
	return memStream{c}, nil
}

var errInjected = errors.New("injected copy error")

func (s memStream) CopyAsync(off, n uint64) (fill.Completion, error) {
	if s.c.failAt >= 0 && uint64(s.c.failAt) >= off && uint64(s.c.failAt) < off+n {
		return fill.Done(errInjected), nil
	}
	copy(s.c.dst[off:off+n], s.c.src[off:off+n])
	return fill.Done(nil), nil
}

func (s memStream) Release(failed error) {
	s.c.mu.Lock()
	s.c.released = append(s.c.released, failed)
	s.c.mu.Unlock()
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(31*i + i>>11)
	}
	return b
}

func TestCopyDeviceCopiesEveryByte(t *testing.T) {
	for _, length := range []int{1, 4095, 4096, 3*4096 + 17} {
		c := &memCopier{src: pattern(length), dst: make([]byte, length), failAt: -1}
		var last uint64
		st, err := fill.CopyDevice(context.Background(), c, uint64(length), fill.CopyOptions{Streams: 3, ChunkBytes: 4096, Depth: 2},
			func(done, total uint64) {
				if done < last || total != uint64(length) {
					t.Errorf("progress %d/%d after %d", done, total, last)
				}
				last = done
			})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.dst, c.src) {
			t.Fatalf("length %d: destination differs from the source", length)
		}
		wantChunks := uint64((length + 4095) / 4096)
		if st.Bytes != uint64(length) || st.Chunks != wantChunks || last != uint64(length) {
			t.Fatalf("length %d: stats %+v, last progress %d", length, st, last)
		}
		if c.acquired != len(c.released) || c.acquired != st.Streams || st.Streams > 3 {
			t.Fatalf("acquired %d streams, released %d, stats %d", c.acquired, len(c.released), st.Streams)
		}
	}
}

func TestCopyDeviceStopsAtTheFirstError(t *testing.T) {
	length := 64 * 4096
	c := &memCopier{src: pattern(length), dst: make([]byte, length), failAt: 5 * 4096}
	st, err := fill.CopyDevice(context.Background(), c, uint64(length), fill.CopyOptions{Streams: 2, ChunkBytes: 4096, Depth: 2}, nil)
	if !errors.Is(err, errInjected) {
		t.Fatalf("err %v, want the injected error", err)
	}
	if st.Bytes >= uint64(length) {
		t.Fatalf("stats %+v after a failed copy", st)
	}
	failed := 0
	for _, e := range c.released {
		if e != nil {
			failed++
		}
	}
	if c.acquired != len(c.released) || failed == 0 {
		t.Fatalf("acquired %d, released %v", c.acquired, c.released)
	}
}

func TestCopyDeviceCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &memCopier{src: pattern(8192), dst: make([]byte, 8192), failAt: -1}
	if _, err := fill.CopyDevice(ctx, c, 8192, fill.CopyOptions{ChunkBytes: 4096}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}
