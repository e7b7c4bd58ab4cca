// Package mmap maps the host memory behind wcache's handles into a process:
// posix-shm files by path and memfd descriptors. It is the one home of
// mmap(2) for the client library (core/client), the backends (sdk/fill, the
// mock plugin) and the bench, so every mapping is made one way (shared,
// private or copy-on-write as Access says),
// sized the same way and refuses a symlink planted at a path.
package mmap

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Access is the protection and sharing of a mapping.
type Access int

const (
	// Read maps PROT_READ, MAP_SHARED: writing to the bytes faults (SIGSEGV).
	Read Access = iota
	// ReadWrite maps PROT_READ|PROT_WRITE, MAP_SHARED: writes reach the
	// file and every other mapping of it.
	ReadWrite
	// ReadPrivate maps PROT_READ, MAP_PRIVATE: it sees every write made
	// through the descriptor, and unlike a shared mapping of a writable
	// descriptor it does not keep a memfd from being sealed against writes
	// (F_SEAL_WRITE). What a backend keeps mapped to read its memfds.
	ReadPrivate
	// CopyOnWrite maps PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_NORESERVE: the
	// bytes are the file's until this process writes to a page, which then
	// becomes a private copy — a write never reaches the file or another
	// process, and never faults. A kernel that refuses a writable private
	// mapping of a write-sealed memfd (before Linux 6.7: EPERM) gets a Read
	// mapping instead, where a write faults. How clients map weights.
	CopyOnWrite
)

func (a Access) prot() int {
	if a == ReadWrite || a == CopyOnWrite {
		return unix.PROT_READ | unix.PROT_WRITE
	}
	return unix.PROT_READ
}

func (a Access) flags() int {
	switch a {
	case ReadPrivate:
		return unix.MAP_PRIVATE
	case CopyOnWrite:
		return unix.MAP_PRIVATE | unix.MAP_NORESERVE
	}
	return unix.MAP_SHARED
}

// openFlags is how Path opens the file: only a shared writable mapping
// needs a writable descriptor.
func (a Access) openFlags() int {
	if a == ReadWrite {
		return unix.O_RDWR
	}
	return unix.O_RDONLY
}

// maxInt is the largest int, the largest mapping a slice can hold.
const maxInt = int(^uint(0) >> 1)

// FD maps the first size bytes of descriptor fd as a says. The descriptor
// may be closed afterwards: the mapping keeps the memory until Unmap. A
// size of 0 maps nothing and returns an empty slice; a size beyond the
// address space is an error. The mmap(2) errno is wrapped, so
// errors.Is(err, unix.ENOMEM) or unix.EACCES tells why it failed. Pages
// past the end of the file fault (SIGBUS) when touched: callers that take
// size from elsewhere check the file's size first.
func FD(fd int, size uint64, a Access) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	if size > uint64(maxInt) {
		return nil, fmt.Errorf("map %d bytes: they do not fit in this address space", size)
	}
	data, err := unix.Mmap(fd, 0, int(size), a.prot(), a.flags())
	if a == CopyOnWrite && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) {
		data, err = unix.Mmap(fd, 0, int(size), Read.prot(), Read.flags())
	}
	if err != nil {
		return nil, fmt.Errorf("mmap (%d bytes): %w", size, err)
	}
	return data, nil
}

// Check is what Path verifies about the file before mapping it.
type Check int

const (
	// Any maps whatever the path names (a size beyond its end faults when
	// touched).
	Any Check = iota
	// Exact wants a regular file of exactly the size to map.
	Exact
)

// Path opens path with O_NOFOLLOW (a symlink planted at the path is
// refused) and O_CLOEXEC, read-only or read-write as a asks, verifies it
// as check says, maps its first size bytes as a says (see FD) and closes the
// descriptor again. Every error names the path.
func Path(path string, size uint64, a Access, check Check) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	fd, err := unix.Open(path, a.openFlags()|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if check == Exact {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, fmt.Errorf("stat %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) != size {
			return nil, fmt.Errorf("%s: want a regular file of %d bytes, found mode %o size %d", path, size, st.Mode, st.Size)
		}
	}
	data, err := FD(fd, size, a)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// Unmap releases a mapping made by FD or Path; an empty slice is a no-op.
func Unmap(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if err := unix.Munmap(data); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// Mincore is mincore(2) over a mapping: vec receives one byte per page of
// b (it must hold (len(b)+pagesize-1)/pagesize bytes), bit 0 set for a
// page in memory. x/sys/unix has no wrapper for it.
func Mincore(b, vec []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if e != 0 {
		return e
	}
	return nil
}
