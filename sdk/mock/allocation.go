package mock

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/sdk"
)

// allocation is one mapped file: an allocation Memory created
// (read-write, owns the file or the memfd), an imported file handle
// (read-only), or an adopted memfd (an imported memfd handle: the same
// memory as its exporter's, exported again as it is; see Import).
type allocation struct {
	id       sdk.AllocationID
	ordinal  int
	size     uint64
	path     string // the file, or "memfd:<name>"
	imported bool
	// memfd: the memory is a memfd (nothing to delete on release);
	// adopted: it came from Import (not counted against the capacity).
	memfd, adopted bool

	// mu guards data and fd: calls that touch the bytes hold it for
	// reading; release takes it for writing, so memory is never unmapped
	// (nor the file closed) under a running Load, Read or Digest.
	mu   sync.RWMutex
	data []byte // nil once released
	// fd is the allocation file opened read-write, which Load writes
	// with pwrite; -1 for an imported mapping and once released.
	fd int
}

// release unmaps the memory and, for an allocation Memory created,
// deletes its file. It is idempotent.
func (a *allocation) release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.data == nil {
		return nil
	}
	var errs []error
	if err := mmap.Unmap(a.data); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", a.path, err))
	}
	a.data = nil
	if a.fd >= 0 {
		if err := unix.Close(a.fd); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", a.path, err))
		}
		a.fd = -1
	}
	if !a.imported && !a.memfd {
		if err := os.Remove(a.path); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", a.path, err))
		}
	}
	return errors.Join(errs...)
}

// acquire read-locks a for a call that touches its bytes. The caller must
// call a.mu.RUnlock when it returns nil.
func (a *allocation) acquire() error {
	a.mu.RLock()
	if a.data == nil {
		a.mu.RUnlock()
		return sdk.Errorf(sdk.ErrNoSuchAllocation, "allocation %d was freed", a.id)
	}
	return nil
}

// checkRange reports a range past the end of a as ErrInvalidArgument.
func (a *allocation) checkRange(what string, offset, length uint64) error {
	if offset > a.size || length > a.size-offset {
		return sdk.Errorf(sdk.ErrInvalidArgument, "%s [%d, +%d) lies outside allocation %d of %d bytes", what, offset, length, a.id, a.size)
	}
	return nil
}

// Allocate creates a sparse file (or memfd) of bytes rounded up to the
// page size and maps it. It reserves nothing: the folder's memory is
// taken page by page as Load writes (reserving it up front with fallocate
// cost about a quarter of a second per GiB of start-up, see
// docs/mock-backend.md). Beyond the device capacity (Memory), it refuses
// with ErrOutOfMemory a file the folder's file system clearly cannot
// hold: more than its free space less what this backend's allocations
// have yet to fill. Space taken by others meanwhile surfaces as
// ErrOutOfMemory from Load.
func (m *Memory) Allocate(_ context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if err := m.checkOrdinal(ordinal); err != nil {
		return 0, 0, err
	}
	if bytes == 0 {
		return 0, 0, sdk.Errorf(sdk.ErrInvalidArgument, "allocate 0 bytes")
	}
	page := uint64(os.Getpagesize())
	if bytes > math.MaxInt64-page {
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes on mock device %d", bytes, ordinal)
	}
	size := (bytes + page - 1) / page * page

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0, 0, errClosed()
	}
	if free := m.opts.Memory - m.used[ordinal]; size > free {
		m.mu.Unlock()
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes on mock device %d: %d of %d bytes free", bytes, ordinal, free, m.opts.Memory)
	}
	if !m.opts.Memfd {
		if err := m.checkFolderSpaceLocked(size); err != nil {
			m.mu.Unlock()
			return 0, 0, fmt.Errorf("allocate %d bytes on mock device %d: %w", bytes, ordinal, err)
		}
	}
	m.used[ordinal] += size
	id := m.nextID
	m.nextID++
	m.mu.Unlock()

	create := m.createFile
	if m.opts.Memfd {
		create = m.createMemfd
	}
	a, err := create(id, ordinal, size)
	if err != nil {
		m.mu.Lock()
		m.used[ordinal] -= size
		m.mu.Unlock()
		return 0, 0, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = a.release()
		return 0, 0, errClosed()
	}
	m.allocs[id] = a
	m.mu.Unlock()
	return id, size, nil
}

// createFile creates the allocation file, sizes it with ftruncate (sparse:
// no memory is taken yet) and maps it read-write. The file stays open for
// Load's writes.
func (m *Memory) createFile(id sdk.AllocationID, ordinal int, size uint64) (*allocation, error) {
	path := filepath.Join(m.opts.Dir, fileName(m.pid, m.nonce, id))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	fail := func(err error) (*allocation, error) {
		_ = unix.Close(fd)
		_ = os.Remove(path)
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(fmt.Errorf("size %s to %d bytes: %w", path, size, err))
	}
	data, err := mmap.FD(fd, size, mmap.ReadWrite)
	if err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return fail(sdk.Errorf(sdk.ErrOutOfMemory, "map %d bytes: %v", size, err))
		}
		return fail(fmt.Errorf("map %s: %w", path, err))
	}
	return &allocation{id: id, ordinal: ordinal, size: size, path: path, data: data, fd: fd}, nil
}

// createMemfd creates an anonymous memfd of size bytes (no name in any
// folder: the memory lives as long as a descriptor or a mapping of it),
// seals its size and maps it for reading (sdk.MapMemfdReadOnly: Load
// writes through the descriptor, and no writable mapping keeps the daemon
// from sealing the memory against writes once it is filled). Like a file,
// it takes no memory until Load writes it.
func (m *Memory) createMemfd(id sdk.AllocationID, ordinal int, size uint64) (*allocation, error) {
	name := fmt.Sprintf("wcache-mock-%s-%d", m.nonce, id)
	f, err := sdk.NewMemfd(name, size)
	if err != nil {
		return nil, err
	}
	// The allocation keeps a raw descriptor (closed by release), not f.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("dup memfd %s: %w", name, err)
	}
	data, err := sdk.MapMemfdReadOnly(fd, size)
	if err != nil {
		_ = unix.Close(fd)
		if errors.Is(err, unix.ENOMEM) {
			return nil, sdk.Errorf(sdk.ErrOutOfMemory, "map %d bytes: %v", size, err)
		}
		return nil, fmt.Errorf("map memfd %s: %w", name, err)
	}
	return &allocation{id: id, ordinal: ordinal, size: size, path: "memfd:" + name, memfd: true, data: data, fd: fd}, nil
}

// Read copies a range of an allocation; at most sdk.MaxReadBytes.
func (m *Memory) Read(_ context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	if length > sdk.MaxReadBytes {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "read of %d bytes exceeds the limit of %d", length, sdk.MaxReadBytes)
	}
	a, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	if err := a.checkRange("read", offset, length); err != nil {
		return nil, err
	}
	if err := a.acquire(); err != nil {
		return nil, err
	}
	defer a.mu.RUnlock()
	return append([]byte(nil), a.data[offset:offset+length]...), nil
}

// Digest hashes each range with SHA-256.
func (m *Memory) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	a, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	for i, r := range ranges {
		if err := a.checkRange(fmt.Sprintf("digest range %d", i), r.Offset, r.Length); err != nil {
			return nil, err
		}
	}
	if err := a.acquire(); err != nil {
		return nil, err
	}
	defer a.mu.RUnlock()
	out := make([][32]byte, len(ranges))
	for i, r := range ranges {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = sha256.Sum256(a.data[r.Offset : r.Offset+r.Length])
	}
	return out, nil
}
