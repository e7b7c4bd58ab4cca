package mock

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// Export returns the handle of an allocation: names.KindPosixShm, its file
// path and size; names.KindMemfd, a duplicate of its descriptor (the
// caller's to close). Writes through the mapping are visible to any
// process that maps the memory, so nothing needs flushing. An adopted
// memfd exports as well; an imported file is ErrInvalidArgument.
func (m *Memory) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	return m.ExportWith(ctx, id, nil)
}

// ExportWith is Export for a backend built on Memory: check runs with the
// allocation's device once the allocation is known to be exportable, and
// its error ends the export (the mock plugin's fault knob). A nil check
// is Export.
func (m *Memory) ExportWith(ctx context.Context, id sdk.AllocationID, check func(ordinal int) error) (sdk.Handle, error) {
	a, err := m.lookup(id)
	if err != nil {
		return sdk.Handle{}, err
	}
	if a.imported {
		return sdk.Handle{}, sdk.Errorf(sdk.ErrInvalidArgument, "allocation %d is an imported mapping and cannot be exported again", id)
	}
	if check != nil {
		if err := check(a.ordinal); err != nil {
			return sdk.Handle{}, err
		}
	}
	if err := a.acquire(); err != nil {
		return sdk.Handle{}, err
	}
	defer a.mu.RUnlock()
	if a.memfd {
		fd, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return sdk.Handle{}, fmt.Errorf("export allocation %d: dup %s: %w", a.id, a.path, err)
		}
		return sdk.Handle{Kind: names.KindMemfd, Size: a.size, File: os.NewFile(uintptr(fd), a.path)}, nil
	}
	return sdk.Handle{Kind: names.KindPosixShm, Data: []byte(a.path), Size: a.size}, nil
}

// Import maps a names.KindPosixShm handle read-only, or adopts a memfd handle
// (see importMemfd). The path must name a regular allocation file
// directly inside this backend's folder (no symlink) whose size is the
// handle's size; anything else is ErrInvalidArgument, and a handle of
// another kind is ErrUnsupported.
func (m *Memory) Import(_ context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if err := m.checkOrdinal(ordinal); err != nil {
		return 0, err
	}
	if h.Kind == names.KindMemfd {
		return m.importMemfd(ordinal, h)
	}
	if h.Kind != names.KindPosixShm {
		return 0, sdk.Errorf(sdk.ErrUnsupported, "import handle of kind %q: the mock backend handles %q and %q", h.Kind, names.KindMemfd, names.KindPosixShm)
	}
	path := string(h.Data)
	if m.opts.Dir == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path || filepath.Dir(path) != m.opts.Dir ||
		!fileNamePattern.MatchString(filepath.Base(path)) {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import handle %q: not an allocation file in %s", path, m.opts.Dir)
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
	return m.adopt(&allocation{ordinal: ordinal, size: h.Size, path: path, imported: true, data: data, fd: -1})
}

// importMemfd adopts a memfd handle: the descriptor is checked (a sealed
// memfd of the handle's size), duplicated and mapped for reading
// (sdk.MapMemfdReadOnly), so that a restarted plugin or a successor daemon
// serves the memory as its own. The result can be exported again (the
// duplicate keeps the access of the descriptor it was given); it is not
// counted against the device's capacity.
func (m *Memory) importMemfd(ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if h.File == nil {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import a memfd handle without its descriptor")
	}
	if h.Size == 0 || h.Size > math.MaxInt64 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import a memfd handle of %d bytes", h.Size)
	}
	if err := sdk.CheckMemfd(h.File, h.Size); err != nil {
		return 0, fmt.Errorf("import memfd handle: %w", err)
	}
	fd, err := unix.FcntlInt(h.File.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("import memfd handle: dup: %w", err)
	}
	data, err := sdk.MapMemfdReadOnly(fd, h.Size)
	if err != nil {
		_ = unix.Close(fd)
		return 0, fmt.Errorf("import memfd handle: map: %w", err)
	}
	return m.adopt(&allocation{ordinal: ordinal, size: h.Size, memfd: true, adopted: true, data: data, fd: fd})
}
