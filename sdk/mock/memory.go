package mock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/wcache/wcache/sdk/fill"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
	"github.com/wcache/wcache/sdk/procstat"
)

// FileHandleKind is the handle kind Memory exports and imports: Data is
// the absolute path of the allocation file, Size its length. Another
// process of the same uid reads it, or maps it with mmap(PROT_READ,
// MAP_SHARED); it is the kind the mock plugin calls "posix-shm".
const FileHandleKind = names.KindPosixShm

// fileSuffix ends every allocation file's name:
// <pid>-<instance nonce>-<id>.shm.
const fileSuffix = ".shm"

// pageSize is the granularity of allocations.
const pageSize = 4096

// copyChunk is how much Load copies between progress reports and context
// checks.
const copyChunk = 4 << 20

// MemoryOptions configure NewMemory.
type MemoryOptions struct {
	// Dir holds the allocation files; created 0700 when missing. Required.
	// Put it on tmpfs (/dev/shm) for speed; any folder works.
	Dir string
	// DeviceUUIDs are the devices, by ordinal. Default: one device,
	// GPU-00000000-0000-4000-8000-000000000000.
	DeviceUUIDs []string
	// Memory is each device's capacity in bytes. Default 1 GiB.
	Memory uint64
	// Memfd makes allocations sealed memfds exported as sdk.HandleMemfd
	// descriptor handles (what the mock plugin does by default) instead of
	// files in Dir exported by path. Dir is then still required but unused.
	Memfd bool
}

// Memory is a working in-process sdk.Backend for tests of code that uses
// a backend: every device is a capacity counter, every allocation a file
// in a folder, written by Load, read by Read and Digest, exported as a
// FileHandleKind handle that another Memory (in this or another process)
// on the same folder imports read-only. It checks arguments the way the
// conformance suite (sdk/backendtest) demands, so errors carry the sdk
// kinds. It is not fast and not a model of any device; for fault
// injection wrap it with Wrap and replace the funcs a test needs to fail.
//
// Files of this process are removed by Free and Close; files of
// processes no longer running (procstat.Running) are removed by NewMemory
// on the same folder.
type Memory struct {
	opts  MemoryOptions
	pid   int
	nonce string

	mu     sync.Mutex
	closed bool
	nextID sdk.AllocationID
	allocs map[sdk.AllocationID]*memAlloc
	used   []uint64
}

var _ sdk.Backend = (*Memory)(nil)

// memAlloc is one allocation or imported file. mu is held shared by calls
// using the file and exclusively by Free.
type memAlloc struct {
	mu       sync.RWMutex
	f        *os.File
	ordinal  int
	size     uint64
	imported bool // read-only, not charged, file not removed
	// memfd: f is a memfd (exported as a descriptor, nothing to remove);
	// an imported memfd is adopted: exportable again, not charged.
	memfd bool
}

// NewMemory creates the folder when missing, removes allocation files
// left there by processes that no longer run, and returns a backend.
func NewMemory(opts MemoryOptions) (*Memory, error) {
	if opts.Dir == "" {
		return nil, errors.New("mock memory: Dir is required")
	}
	if len(opts.DeviceUUIDs) == 0 {
		opts.DeviceUUIDs = []string{"GPU-00000000-0000-4000-8000-000000000000"}
	}
	if opts.Memory == 0 {
		opts.Memory = 1 << 30
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("mock memory: %w", err)
	}
	opts.Dir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mock memory: %w", err)
	}
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("mock memory: instance nonce: %w", err)
	}
	m := &Memory{opts: opts, pid: os.Getpid(), nonce: hex.EncodeToString(nonce[:]), nextID: 1,
		allocs: make(map[sdk.AllocationID]*memAlloc), used: make([]uint64, len(opts.DeviceUUIDs))}
	if err := removeDeadFiles(dir); err != nil {
		return nil, fmt.Errorf("mock memory: %w", err)
	}
	return m, nil
}

// removeDeadFiles removes allocation files whose process no longer runs.
func removeDeadFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		pidText, _, ok := strings.Cut(name, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || !strings.HasSuffix(name, fileSuffix) {
			continue
		}
		if !procstat.Running(pid) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Dir is the folder of the allocation files.
func (m *Memory) Dir() string { return m.opts.Dir }

// Info names the backend "mock" on platform "mock".
func (m *Memory) Info(context.Context) (sdk.Info, error) {
	kind := FileHandleKind
	if m.opts.Memfd {
		kind = sdk.HandleMemfd
	}
	return sdk.Info{Name: "mock", Version: "sdk-mock", Platform: "mock", HandleKinds: []string{kind}}, nil
}

// Devices lists the devices with their free memory.
func (m *Memory) Devices(context.Context) ([]sdk.Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]sdk.Device, len(m.opts.DeviceUUIDs))
	for i, u := range m.opts.DeviceUUIDs {
		out[i] = sdk.Device{Ordinal: i, UUID: u, Name: "sdk/mock memory device", TotalMemory: m.opts.Memory,
			FreeMemory: m.opts.Memory - m.used[i], Capability: "mock"}
	}
	return out, nil
}

// DeviceUUID returns the UUID of a device.
func (m *Memory) DeviceUUID(_ context.Context, ordinal int) (string, error) {
	if err := m.checkOrdinal(ordinal); err != nil {
		return "", err
	}
	return m.opts.DeviceUUIDs[ordinal], nil
}

func (m *Memory) checkOrdinal(ordinal int) error {
	if ordinal < 0 || ordinal >= len(m.opts.DeviceUUIDs) {
		return sdk.Errorf(sdk.ErrNoSuchDevice, "mock device %d (there are %d)", ordinal, len(m.opts.DeviceUUIDs))
	}
	return nil
}

// Allocate creates a file of bytes rounded up to 4 KiB.
func (m *Memory) Allocate(_ context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if err := m.checkOrdinal(ordinal); err != nil {
		return 0, 0, err
	}
	if bytes == 0 {
		return 0, 0, sdk.Errorf(sdk.ErrInvalidArgument, "allocate 0 bytes")
	}
	if bytes > m.opts.Memory {
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes on a %d-byte device", bytes, m.opts.Memory)
	}
	size := (bytes + pageSize - 1) / pageSize * pageSize
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, 0, sdk.Errorf(sdk.ErrUnavailable, "mock memory is closed")
	}
	if m.opts.Memory-m.used[ordinal] < size {
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes: %d of %d free on device %d",
			size, m.opts.Memory-m.used[ordinal], m.opts.Memory, ordinal)
	}
	id := m.nextID
	var f *os.File
	var err error
	if m.opts.Memfd {
		f, err = sdk.NewMemfd(fmt.Sprintf("sdk-mock-%s-%d", m.nonce, id), size)
	} else {
		f, err = m.createFile(id, size)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("mock memory: allocate: %w", err)
	}
	m.nextID++
	m.used[ordinal] += size
	m.allocs[id] = &memAlloc{f: f, ordinal: ordinal, size: size, memfd: m.opts.Memfd}
	return id, size, nil
}

// createFile creates allocation file id of size bytes in Dir.
func (m *Memory) createFile(id sdk.AllocationID, size uint64) (*os.File, error) {
	path := filepath.Join(m.opts.Dir, fmt.Sprintf("%d-%s-%d%s", m.pid, m.nonce, id, fileSuffix))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return f, nil
}

// lookup returns a live allocation, read-locked; the caller unlocks.
func (m *Memory) lookup(id sdk.AllocationID) (*memAlloc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, sdk.Errorf(sdk.ErrUnavailable, "mock memory is closed")
	}
	a, ok := m.allocs[id]
	if !ok {
		return nil, sdk.Errorf(sdk.ErrNoSuchAllocation, "allocation %d", id)
	}
	a.mu.RLock()
	return a, nil
}

// inside reports whether [off, off+n) lies in [0, size) without overflow.
func inside(off, n, size uint64) bool { return off <= size && n <= size-off }

// Load copies every extent, checking all of them first: an extent past
// the allocation's end, a missing file or a range past a file's end is
// ErrInvalidArgument, and so is loading into an imported mapping.
func (m *Memory) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	_, err := m.LoadWithStats(ctx, id, extents, progress)
	return err
}

// LoadWithStats is Load through the shared fill pipeline (sdk/fill) with a
// pwrite into the allocation's file as the "copy", so tests that use
// Memory exercise the same pipeline as the real backends and get its
// counters.
func (m *Memory) LoadWithStats(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) (sdk.LoadStats, error) {
	a, err := m.lookup(id)
	if err != nil {
		return sdk.LoadStats{}, err
	}
	defer a.mu.RUnlock()
	if a.imported && !a.memfd {
		return sdk.LoadStats{}, sdk.Errorf(sdk.ErrInvalidArgument, "load into imported mapping %d", id)
	}
	for i, e := range extents {
		if !inside(e.DestOffset, e.Length, a.size) {
			return sdk.LoadStats{}, sdk.Errorf(sdk.ErrInvalidArgument, "extent %d [%d, +%d) outside the %d-byte allocation", i, e.DestOffset, e.Length, a.size)
		}
	}
	st, err := fill.Fill(ctx, fill.WriterAt{W: a.f}, a.size, extents, progress, fill.Options{Buffers: 1, BufferBytes: copyChunk})
	if err != nil {
		return st, fmt.Errorf("load into allocation %d: %w", id, err)
	}
	return st, nil
}

// Export returns the allocation's file as a FileHandleKind handle.
func (m *Memory) Export(_ context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	a, err := m.lookup(id)
	if err != nil {
		return sdk.Handle{}, err
	}
	defer a.mu.RUnlock()
	if a.memfd {
		f, err := sdk.DupFile(a.f)
		if err != nil {
			return sdk.Handle{}, fmt.Errorf("mock memory: export: %w", err)
		}
		return sdk.Handle{Kind: sdk.HandleMemfd, Size: a.size, File: f}, nil
	}
	return sdk.Handle{Kind: FileHandleKind, Data: []byte(a.f.Name()), Size: a.size}, nil
}

// Import opens, read-only, an allocation file of this folder named by a
// FileHandleKind handle. Anything else is ErrInvalidArgument (another
// kind: ErrUnsupported).
func (m *Memory) Import(_ context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if err := m.checkOrdinal(ordinal); err != nil {
		return 0, err
	}
	if h.Kind == sdk.HandleMemfd {
		return m.importMemfd(ordinal, h)
	}
	if h.Kind != FileHandleKind {
		return 0, sdk.Errorf(sdk.ErrUnsupported, "handle kind %q (mock memory imports %q)", h.Kind, FileHandleKind)
	}
	path := string(h.Data)
	if filepath.Dir(path) != m.opts.Dir || !strings.HasSuffix(path, fileSuffix) || filepath.Clean(path) != path {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "handle %q names no allocation file of %s", path, m.opts.Dir)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: %v", err)
	}
	st, err := f.Stat()
	if err != nil || uint64(st.Size()) != h.Size {
		f.Close()
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import %s: size is not the handle's %d bytes", path, h.Size)
	}
	return m.adopt(&memAlloc{f: f, ordinal: ordinal, size: h.Size, imported: true})
}

// importMemfd adopts a sealed memfd of the handle's size (a duplicate of
// its descriptor): the same memory, exportable again, not charged.
func (m *Memory) importMemfd(ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if h.File == nil || h.Size == 0 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import a memfd handle of %d bytes without a descriptor", h.Size)
	}
	if err := sdk.CheckMemfd(h.File, h.Size); err != nil {
		return 0, fmt.Errorf("mock memory: import: %w", err)
	}
	f, err := sdk.DupFile(h.File)
	if err != nil {
		return 0, fmt.Errorf("mock memory: import: %w", err)
	}
	return m.adopt(&memAlloc{f: f, ordinal: ordinal, size: h.Size, memfd: true, imported: true})
}

// adopt registers an imported file under a new id (it is not charged);
// once Close ran, it closes the file and fails with ErrUnavailable.
func (m *Memory) adopt(a *memAlloc) (sdk.AllocationID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		a.f.Close()
		return 0, sdk.Errorf(sdk.ErrUnavailable, "mock memory is closed")
	}
	id := m.nextID
	m.nextID++
	m.allocs[id] = a
	return id, nil
}

// Read returns [offset, offset+length); at most sdk.MaxReadBytes.
func (m *Memory) Read(_ context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	a, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	defer a.mu.RUnlock()
	if length > sdk.MaxReadBytes || !inside(offset, length, a.size) {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "read [%d, +%d) of a %d-byte allocation", offset, length, a.size)
	}
	p := make([]byte, length)
	if _, err := a.f.ReadAt(p, int64(offset)); err != nil {
		return nil, fmt.Errorf("mock memory: read: %w", err)
	}
	return p, nil
}

// Digest returns the SHA-256 of each range.
func (m *Memory) Digest(_ context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	a, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	defer a.mu.RUnlock()
	out := make([][32]byte, len(ranges))
	for i, r := range ranges {
		if !inside(r.Offset, r.Length, a.size) {
			return nil, sdk.Errorf(sdk.ErrInvalidArgument, "digest range %d [%d, +%d) of a %d-byte allocation", i, r.Offset, r.Length, a.size)
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(a.f, int64(r.Offset), int64(r.Length))); err != nil {
			return nil, fmt.Errorf("mock memory: digest: %w", err)
		}
		copy(out[i][:], h.Sum(nil))
	}
	return out, nil
}

// Free closes an allocation and removes its file, or closes an imported
// one. It waits for calls still using it.
func (m *Memory) Free(_ context.Context, id sdk.AllocationID) error {
	m.mu.Lock()
	a, ok := m.allocs[id]
	if ok {
		delete(m.allocs, id)
		if !a.imported {
			m.used[a.ordinal] -= a.size
		}
	}
	m.mu.Unlock()
	if !ok {
		return sdk.Errorf(sdk.ErrNoSuchAllocation, "free allocation %d", id)
	}
	return a.release()
}

func (a *memAlloc) release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.f.Close()
	if !a.imported && !a.memfd {
		if rerr := os.Remove(a.f.Name()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return fmt.Errorf("mock memory: free: %w", err)
	}
	return nil
}

// Close frees every allocation, removing its file; later calls fail with
// ErrUnavailable. It is safe to call more than once.
func (m *Memory) Close() error {
	m.mu.Lock()
	m.closed = true
	all := m.allocs
	m.allocs = map[sdk.AllocationID]*memAlloc{}
	m.mu.Unlock()
	var errs []error
	for _, a := range all {
		errs = append(errs, a.release())
	}
	return errors.Join(errs...)
}
