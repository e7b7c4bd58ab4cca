package lanepool

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/staging"
)

// fakeStreams copy at once into dev; every stream, buffer and event made
// is counted, and freeing one drops the count.
type fakeStreams struct {
	dev                     []byte
	streams, bufs, events   int
	recorded, synchronised  int
	failHostAlloc, failCopy bool
}

type fakeBuffer struct{ b []byte }

func (b fakeBuffer) Bytes() []byte { return b.b }
func (b fakeBuffer) Len() int      { return len(b.b) }

func (f *fakeStreams) StreamCreate() (int, error)  { f.streams++; return f.streams, nil }
func (f *fakeStreams) StreamSynchronize(int) error { return nil }
func (f *fakeStreams) StreamDestroy(int) error     { f.streams--; return nil }
func (f *fakeStreams) EventCreate() (int, error)   { f.events++; return f.events, nil }
func (f *fakeStreams) EventRecord(int, int) error  { f.recorded++; return nil }
func (f *fakeStreams) EventSynchronize(int) error  { f.synchronised++; return nil }
func (f *fakeStreams) EventDestroy(int) error      { f.events--; return nil }
func (f *fakeStreams) HostFree(fakeBuffer) error   { f.bufs--; return nil }
func (f *fakeStreams) HostAlloc(size int) (fakeBuffer, error) {
	if f.failHostAlloc {
		return fakeBuffer{}, errors.New("out of pinned memory")
	}
	f.bufs++
	return fakeBuffer{make([]byte, size)}, nil
}
func (f *fakeStreams) CopyHtoD(dst uint64, b fakeBuffer, off, n int, _ int) error {
	if f.failCopy {
		return errors.New("copy refused")
	}
	copy(f.dev[dst:], b.b[off:off+n])
	return nil
}

// A fill reader binds, copies out of a staging buffer to Base+dst, waits
// on the buffer's event and unbinds when it gives the lane back.
func TestStreamCopierCopiesThroughALaneAndUnbinds(t *testing.T) {
	api := &fakeStreams{dev: make([]byte, 64)}
	pool := NewStreams[int, fakeBuffer, int](api, 1, staging.NewPlacer(-1, nil), nil)
	bound := 0
	c := StreamCopier[int, fakeBuffer, int]{API: api, Pool: pool, Base: 16,
		Bind:   func() error { bound++; return nil },
		Unbind: func() error { bound--; return nil }}
	l, err := c.Acquire(context.Background(), 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	if bound != 1 || api.streams != 1 || api.bufs != 2 || api.events != 2 {
		t.Fatalf("bound %d, %d streams, %d buffers, %d events; want 1, 1, 2, 2", bound, api.streams, api.bufs, api.events)
	}
	copy(l.Buffer(1), "abcdefgh")
	done, err := l.CopyAsync(1, 2, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Wait(); err != nil || api.recorded != 1 || api.synchronised != 1 {
		t.Fatalf("Wait = %v after %d records, %d synchronisations; want one each", err, api.recorded, api.synchronised)
	}
	if got := string(api.dev[24:28]); got != "cdef" {
		t.Fatalf("device bytes at Base+8 = %q, want cdef", got)
	}
	l.Release(nil)
	if bound != 0 {
		t.Fatal("Release left the reader bound to the device")
	}
	if err := pool.Free(); err != nil || api.streams != 0 || api.bufs != 0 || api.events != 0 {
		t.Fatalf("Free = %v, left %d streams, %d buffers, %d events", err, api.streams, api.bufs, api.events)
	}
}

// A lane that cannot be made frees what it had, names what failed, and
// leaves the reader unbound; a failed copy's lane is destroyed on Release.
func TestStreamLaneFailuresFreeAndUnbind(t *testing.T) {
	api := &fakeStreams{dev: make([]byte, 64), failHostAlloc: true}
	pool := NewStreams[int, fakeBuffer, int](api, 1, staging.NewPlacer(-1, nil), nil)
	bound := 0
	c := StreamCopier[int, fakeBuffer, int]{API: api, Pool: pool,
		Bind:   func() error { bound++; return nil },
		Unbind: func() error { bound--; return nil }}
	if _, err := c.Acquire(context.Background(), 2, 8); err == nil || !strings.Contains(err.Error(), "pinned staging memory") {
		t.Fatalf("Acquire without pinned memory = %v, want an error naming the staging memory", err)
	}
	if bound != 0 || api.streams != 0 || api.events != 0 {
		t.Fatalf("after a failed Acquire: bound %d, %d streams, %d events; want none", bound, api.streams, api.events)
	}
	api.failHostAlloc, api.failCopy = false, true
	l, err := c.Acquire(context.Background(), 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.CopyAsync(0, 0, 8, 0)
	if err == nil {
		t.Fatal("CopyAsync succeeded while the copy is refused")
	}
	l.Release(err)
	if bound != 0 || api.streams != 0 || api.bufs != 0 {
		t.Fatalf("after releasing a failed lane: bound %d, %d streams, %d buffers; want it destroyed", bound, api.streams, api.bufs)
	}
}
