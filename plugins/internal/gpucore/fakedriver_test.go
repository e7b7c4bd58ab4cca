package gpucore_test

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// fakeKind is the handle kind of the fake driver.
const fakeKind = "x-gpucore-fake"

// span is the distance between two fake device addresses: an address is
// its allocation's base plus an offset below span.
const span = gpucore.Ptr(1) << 40

// space is the device memory the fake processes (fakeDrivers) share: what
// one exports, another opens by handle.
type space struct {
	mu      sync.Mutex
	next    gpucore.Ptr
	bufs    map[gpucore.Ptr][]byte         // by base: allocations and opened mappings
	handles map[gpucore.Handle]gpucore.Ptr // exported handle → allocation base
	owner   map[gpucore.Ptr]*fakeDriver    // allocation base → the process that made it
}

func newSpace() *space {
	return &space{next: span, bufs: map[gpucore.Ptr][]byte{}, handles: map[gpucore.Handle]gpucore.Ptr{}, owner: map[gpucore.Ptr]*fakeDriver{}}
}

// fakeErr is a driver result code.
type fakeErr struct {
	code           string
	invalidContext bool
	kind           error // the sdk kind it maps to, or nil
}

func (e *fakeErr) Error() string { return "fake driver: " + e.code }
func (e *fakeErr) Unwrap() error { return e.kind }

// fakeDriver is one process's gpucore.Driver over host memory in a space.
// It counts the calls a test checks and can latch a fatal error.
type fakeDriver struct {
	sp       *space
	devices  int
	capacity uint64 // per process, all devices together

	mu    sync.Mutex
	used  uint64
	calls map[string]int
	fatal error
}

var _ gpucore.Driver = (*fakeDriver)(nil)

func newFakeDriver(sp *space, devices int, capacity uint64) *fakeDriver {
	return &fakeDriver{sp: sp, devices: devices, capacity: capacity, calls: map[string]int{}}
}

func (d *fakeDriver) count(name string) {
	d.mu.Lock()
	d.calls[name]++
	d.mu.Unlock()
}

// Calls returns how often the named method ran.
func (d *fakeDriver) Calls(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[name]
}

func (d *fakeDriver) setFatal(err error) {
	d.mu.Lock()
	d.fatal = err
	d.mu.Unlock()
}

func (d *fakeDriver) Name() string       { return "Fake" }
func (d *fakeDriver) HandleKind() string { return fakeKind }
func (d *fakeDriver) DeviceCount() int   { return d.devices }
func (d *fakeDriver) Fatal() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fatal
}
func (d *fakeDriver) FillOptions() fill.Options      { return fill.Options{Readers: 2} }
func (d *fakeDriver) Setup(ordinal int) (any, error) { d.count("Setup"); return ordinal, nil }
func (d *fakeDriver) Cleanup(*gpucore.Worker) error  { d.count("Cleanup"); return nil }
func (d *fakeDriver) Synchronize() error             { return nil }
func (d *fakeDriver) MemGetInfo() (uint64, error)    { return d.capacity - d.usedBytes(), nil }
func (d *fakeDriver) OpenFailure(err error) (bool, bool) {
	var fe *fakeErr
	if errors.As(err, &fe) {
		return true, fe.invalidContext
	}
	return false, false
}

func (d *fakeDriver) usedBytes() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

func (d *fakeDriver) Malloc(n uint64) (gpucore.Ptr, error) {
	d.count("Malloc")
	d.mu.Lock()
	if d.used+n > d.capacity {
		d.mu.Unlock()
		return 0, &fakeErr{code: "out of memory", kind: sdk.ErrOutOfMemory}
	}
	d.used += n
	d.mu.Unlock()
	d.sp.mu.Lock()
	defer d.sp.mu.Unlock()
	p := d.sp.next
	d.sp.next += span
	d.sp.bufs[p] = make([]byte, n)
	d.sp.owner[p] = d
	return p, nil
}

func (d *fakeDriver) Free(p gpucore.Ptr) error {
	d.count("Free")
	d.sp.mu.Lock()
	b, ok := d.sp.bufs[p]
	if !ok || d.sp.owner[p] != d {
		d.sp.mu.Unlock()
		return &fakeErr{code: fmt.Sprintf("free of unknown base %#x", p)}
	}
	delete(d.sp.bufs, p)
	delete(d.sp.owner, p)
	for h, base := range d.sp.handles {
		if base == p {
			delete(d.sp.handles, h)
		}
	}
	d.sp.mu.Unlock()
	d.mu.Lock()
	d.used -= uint64(len(b))
	d.mu.Unlock()
	return nil
}

func (d *fakeDriver) IpcGet(p gpucore.Ptr) (gpucore.Handle, error) {
	d.count("IpcGet")
	var h gpucore.Handle
	copy(h[:], fmt.Sprintf("fake-ipc-%x", uint64(p)))
	d.sp.mu.Lock()
	defer d.sp.mu.Unlock()
	if _, ok := d.sp.bufs[p]; !ok {
		return h, &fakeErr{code: "invalid value"}
	}
	d.sp.handles[h] = p
	return h, nil
}

// IpcOpen maps another process's allocation at a new base, sharing its
// bytes; the process that exported it gets the invalid-context error, as
// from legacy CUDA IPC.
func (d *fakeDriver) IpcOpen(h gpucore.Handle) (gpucore.Ptr, error) {
	d.count("IpcOpen")
	d.sp.mu.Lock()
	defer d.sp.mu.Unlock()
	base, ok := d.sp.handles[h]
	if !ok {
		return 0, &fakeErr{code: "invalid handle"}
	}
	if d.sp.owner[base] == d {
		return 0, &fakeErr{code: "invalid context", invalidContext: true}
	}
	p := d.sp.next
	d.sp.next += span
	d.sp.bufs[p] = d.sp.bufs[base]
	return p, nil
}

func (d *fakeDriver) IpcClose(p gpucore.Ptr) error {
	d.count("IpcClose")
	d.sp.mu.Lock()
	defer d.sp.mu.Unlock()
	if _, ok := d.sp.bufs[p]; !ok || d.sp.owner[p] != nil {
		return &fakeErr{code: "invalid value"}
	}
	delete(d.sp.bufs, p)
	return nil
}

func (d *fakeDriver) MappedBytes(p gpucore.Ptr) uint64 {
	d.sp.mu.Lock()
	defer d.sp.mu.Unlock()
	return uint64(len(d.sp.bufs[p]))
}

// at returns the bytes from device address p to the end of its
// allocation.
func (d *fakeDriver) at(p gpucore.Ptr) ([]byte, error) {
	base, off := p/span*span, uint64(p%span)
	d.sp.mu.Lock()
	defer d.sp.mu.Unlock()
	b, ok := d.sp.bufs[base]
	if !ok || off > uint64(len(b)) {
		return nil, &fakeErr{code: fmt.Sprintf("illegal address %#x", p)}
	}
	return b[off:], nil
}

func (d *fakeDriver) MemcpyDtoH(dst []byte, src gpucore.Ptr) error {
	b, err := d.at(src)
	if err != nil {
		return err
	}
	if len(dst) > len(b) {
		return &fakeErr{code: "illegal address"}
	}
	copy(dst, b)
	return nil
}

func (d *fakeDriver) Copier(_ *gpucore.Worker, base gpucore.Ptr) fill.Copier {
	return fill.WriterAt{W: deviceWriter{d, base}}
}

// deviceWriter writes at offsets of the allocation at base.
type deviceWriter struct {
	d    *fakeDriver
	base gpucore.Ptr
}

func (w deviceWriter) WriteAt(p []byte, off int64) (int, error) {
	b, err := w.d.at(w.base + gpucore.Ptr(off))
	if err != nil {
		return 0, err
	}
	if len(p) > len(b) {
		return 0, io.ErrShortWrite
	}
	return copy(b, p), nil
}
