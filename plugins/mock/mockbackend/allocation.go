package mockbackend

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

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mmap"
)

// allocation is one mapped file: an allocation this backend created
// (read-write, owns the file or the memfd), an imported posix-shm handle
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

// release unmaps the memory and, for an allocation this backend created,
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

// Allocate creates a sparse file of bytes rounded up to the page size and
// maps it read-write. It reserves nothing: the folder's memory is taken
// page by page as Load writes (reserving it up front with fallocate cost
// about a quarter of a second per GiB of start-up, see
// docs/mock-backend.md). Beyond the device capacity (Config.Memory), it
// refuses with ErrOutOfMemory a size the folder's file system clearly
// cannot hold: more than its free space less what this backend's
// allocations have yet to fill. Space taken by others meanwhile surfaces
// as ErrOutOfMemory from Load.
func (b *Backend) Allocate(_ context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if err := b.checkOrdinal(ordinal); err != nil {
		return 0, 0, err
	}
	if bytes == 0 {
		return 0, 0, sdk.Errorf(sdk.ErrInvalidArgument, "allocate 0 bytes")
	}
	if b.faults(ordinal).FailAllocate {
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes on mock device %d: injected by %s", bytes, ordinal, EnvFailAllocate)
	}
	page := uint64(os.Getpagesize())
	if bytes > math.MaxInt64-page {
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes on mock device %d", bytes, ordinal)
	}
	size := (bytes + page - 1) / page * page

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, 0, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
	}
	if free := b.cfg.Memory - b.used[ordinal]; size > free {
		b.mu.Unlock()
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes on mock device %d: %d of %d bytes free", bytes, ordinal, free, b.cfg.Memory)
	}
	if b.cfg.Handle == HandlePosixShm {
		if err := b.checkFolderSpaceLocked(size); err != nil {
			b.mu.Unlock()
			return 0, 0, fmt.Errorf("allocate %d bytes on mock device %d: %w", bytes, ordinal, err)
		}
	}
	b.used[ordinal] += size
	id := b.nextID
	b.nextID++
	b.mu.Unlock()

	create := b.createFile
	if b.cfg.Handle == HandleMemfd {
		create = b.createMemfd
	}
	a, err := create(id, ordinal, size)
	if err != nil {
		b.mu.Lock()
		b.used[ordinal] -= size
		b.mu.Unlock()
		return 0, 0, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = a.release()
		return 0, 0, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
	}
	b.allocs[id] = a
	b.mu.Unlock()
	return id, size, nil
}

// createFile creates the allocation file, sizes it with ftruncate (sparse:
// no memory is taken yet) and maps it read-write. The file stays open for
// Load's writes.
func (b *Backend) createFile(id sdk.AllocationID, ordinal int, size uint64) (*allocation, error) {
	path := filepath.Join(b.dir, fmt.Sprintf("%d-%s-%d.shm", b.pid, b.nonce, id))
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

// Export returns the handle of an allocation: posix-shm, its file path and
// size; memfd, a duplicate of its descriptor (the caller's to close).
// Writes through the mapping are visible to any process that maps the
// memory, so nothing needs flushing. An adopted memfd exports as well.
func (b *Backend) Export(_ context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	a, err := b.lookup(id)
	if err != nil {
		return sdk.Handle{}, err
	}
	if a.imported {
		return sdk.Handle{}, sdk.Errorf(sdk.ErrInvalidArgument, "allocation %d is an imported mapping and cannot be exported again", id)
	}
	if b.faults(a.ordinal).FailExport {
		return sdk.Handle{}, fmt.Errorf("export allocation %d: injected by %s", id, EnvFailExport)
	}
	if err := a.acquire(); err != nil {
		return sdk.Handle{}, err
	}
	defer a.mu.RUnlock()
	if a.memfd {
		fd, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return sdk.Handle{}, fmt.Errorf("export allocation %d: dup %s: %w", id, a.path, err)
		}
		return sdk.Handle{Kind: HandleMemfd, Size: a.size, File: os.NewFile(uintptr(fd), a.path)}, nil
	}
	return sdk.Handle{Kind: HandlePosixShm, Data: []byte(a.path), Size: a.size}, nil
}

// Import maps a posix-shm handle read-only. The path must name a regular
// allocation file directly inside this backend's folder (no symlink) whose
// size is the handle's size; anything else is ErrInvalidArgument, and a
// handle of another kind is ErrUnsupported.
func (b *Backend) Import(_ context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if err := b.checkOrdinal(ordinal); err != nil {
		return 0, err
	}
	if h.Kind == HandleMemfd {
		return b.importMemfd(ordinal, h)
	}
	if h.Kind != HandlePosixShm {
		return 0, sdk.Errorf(sdk.ErrUnsupported, "import handle of kind %q: the mock backend handles %q and %q", h.Kind, HandleMemfd, HandlePosixShm)
	}
	path := string(h.Data)
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || filepath.Dir(path) != b.dir ||
		!fileNamePattern.MatchString(filepath.Base(path)) {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import handle %q: not an allocation file in %s", path, b.dir)
	}
	if h.Size == 0 || h.Size > math.MaxInt64 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import handle %q: size %d", path, h.Size)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("import handle %q: open: %w: %w", path, err, sdk.ErrInvalidArgument)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("import handle %q: stat: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(h.Size) {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import handle %q: want a regular file of %d bytes, found mode %o size %d", path, h.Size, st.Mode, st.Size)
	}
	data, err := mmap.FD(fd, h.Size, mmap.Read)
	if err != nil {
		return 0, fmt.Errorf("import handle %q: map: %w", path, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		_ = mmap.Unmap(data)
		return 0, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
	}
	id := b.nextID
	b.nextID++
	b.allocs[id] = &allocation{id: id, ordinal: ordinal, size: h.Size, path: path, imported: true, data: data, fd: -1}
	return id, nil
}

// Read copies a range of an allocation.
func (b *Backend) Read(_ context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	if length > sdk.MaxReadBytes {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "read of %d bytes exceeds the limit of %d", length, sdk.MaxReadBytes)
	}
	a, err := b.lookup(id)
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
func (b *Backend) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	a, err := b.lookup(id)
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
