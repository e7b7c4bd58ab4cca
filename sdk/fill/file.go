package fill

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk/filedigest"
)

// file is one source file of a Fill, shared by every reader. It is always
// open buffered; it also has an O_DIRECT descriptor when the DirectMode
// chose it and the filesystem accepted it. The first read O_DIRECT refuses
// turns direct reads off for the rest of the Fill (the descriptor stays
// open until close, so no reader can race with its closing).
type file struct {
	path      string
	size      int64
	buffered  *os.File
	direct    *os.File // nil when not used
	directOff atomic.Bool
	pread     func(fd int, p []byte, off int64) (int, error)
	// digest collects the content-digest leaves of what the fill reads;
	// nil when Options.NoDigest.
	digest *filedigest.Assembler
}

// openFile opens path for a Fill. Errors wrap the os error
// (errors.Is(err, fs.ErrNotExist) for a missing file); a path that is not
// a regular file is an error too.
func openFile(path string, mode DirectMode, pread func(int, []byte, int64) (int, error)) (*file, error) {
	if pread == nil {
		pread = unix.Pread
	}
	b, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := b.Stat()
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		_ = b.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f := &file{path: path, size: st.Size(), buffered: b, pread: pread}
	if mode == DirectAlways || (mode == DirectAuto && !mostlyResident(int(b.Fd()), f.size)) {
		d, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
		switch {
		case err == nil:
			f.direct = d
		case refusesDirect(err):
			// The filesystem refuses O_DIRECT: buffered it is.
		default:
			_ = b.Close()
			return nil, fmt.Errorf("open %s with O_DIRECT: %w", path, err)
		}
	}
	return f, nil
}

// refusesDirect reports whether err is O_DIRECT being refused (rather
// than a real I/O error): EINVAL (filesystem or alignment), EFAULT (a
// buffer the kernel cannot pin for DMA) or EOPNOTSUPP.
func refusesDirect(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EFAULT) || errors.Is(err, unix.EOPNOTSUPP)
}

// isDirect reports whether reads still use O_DIRECT.
func (f *file) isDirect() bool { return f.direct != nil && !f.directOff.Load() }

// alignment returns the alignment to plan this file's reads with.
func (f *file) alignment() int {
	if f.isDirect() {
		return Alignment
	}
	return 1
}

// readChunk performs c's read into buf (len(buf) >= c.ReadLen). It returns
// an error wrapping io.ErrUnexpectedEOF when the file ends before
// c.Skip+c.Len bytes. O_DIRECT is used only while the file reads direct
// and buf's address and the offsets are aligned; a read O_DIRECT refuses
// turns it off for the file and is retried buffered.
func (f *file) readChunk(buf []byte, c Chunk) error {
	if len(buf) < c.ReadLen {
		return fmt.Errorf("read %s: %d-byte buffer for a %d-byte read", f.path, len(buf), c.ReadLen)
	}
	need := c.Skip + c.Len
	got := 0
	for got < need {
		off := int64(c.ReadOffset) + int64(got)
		p := buf[got:c.ReadLen]
		fd, direct := f.fdFor(p, off)
		n, err := f.pread(fd, p, off)
		switch {
		case err == nil && n == 0:
			return fmt.Errorf("read %s at %d: file ends before the extent does: %w", f.path, off, io.ErrUnexpectedEOF)
		case err == nil:
			got += n
		case errors.Is(err, unix.EINTR):
		case direct && refusesDirect(err):
			f.directOff.Store(true)
		default:
			return fmt.Errorf("read %s at %d: %w", f.path, off, err)
		}
	}
	return nil
}

// fdFor picks the descriptor for a read of p at off.
func (f *file) fdFor(p []byte, off int64) (fd int, direct bool) {
	if f.isDirect() && off%Alignment == 0 && len(p)%Alignment == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(p)))%Alignment == 0 {
		return int(f.direct.Fd()), true
	}
	return int(f.buffered.Fd()), false
}

// close closes the file's descriptors.
func (f *file) close() error {
	errs := []error{f.buffered.Close()}
	if f.direct != nil {
		errs = append(errs, f.direct.Close())
	}
	return errors.Join(errs...)
}
