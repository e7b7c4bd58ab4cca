package staging

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// File is an open source file. It reads with O_DIRECT when the filesystem
// allows it and falls back to buffered reads, for good, on the first
// EINVAL. It is not safe for concurrent use.
type File struct {
	path     string
	size     int64
	direct   *os.File // nil when O_DIRECT is off or refused
	buffered *os.File // opened on first need
	// pread is unix.Pread; tests replace it to inject errors.
	pread func(fd int, p []byte, off int64) (int, error)
}

// Open opens path for reading, with O_DIRECT when tryDirect is set and the
// filesystem accepts it. Errors wrap the os error (errors.Is(err,
// fs.ErrNotExist) for a missing file).
func Open(path string, tryDirect bool) (*File, error) {
	f := &File{path: path, pread: unix.Pread}
	if tryDirect {
		d, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
		switch {
		case err == nil:
			f.direct = d
		case errors.Is(err, unix.EINVAL):
			// The filesystem refuses O_DIRECT: buffered below.
		default:
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	if f.direct == nil {
		b, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		f.buffered = b
	}
	st, err := f.handle().Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: not a regular file", path)
	}
	f.size = st.Size()
	return f, nil
}

func (f *File) handle() *os.File {
	if f.direct != nil {
		return f.direct
	}
	return f.buffered
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Size returns the file's size at Open.
func (f *File) Size() int64 { return f.size }

// Direct reports whether reads still use O_DIRECT.
func (f *File) Direct() bool { return f.direct != nil }

// Alignment returns the alignment to plan reads with: Alignment while the
// file reads with O_DIRECT, else 1.
func (f *File) Alignment() int {
	if f.Direct() {
		return Alignment
	}
	return 1
}

// ReadChunk performs c's read into buf (len(buf) >= c.ReadLen). It returns
// an error wrapping io.ErrUnexpectedEOF when the file ends before
// c.Skip+c.Len bytes. O_DIRECT is used only while the file, buf's address
// and the offsets are aligned; otherwise, and after any EINVAL, the read
// is buffered.
func (f *File) ReadChunk(buf []byte, c Chunk) error {
	if len(buf) < c.ReadLen {
		return fmt.Errorf("read %s: %d-byte buffer for a %d-byte read", f.path, len(buf), c.ReadLen)
	}
	need := c.Skip + c.Len
	got := 0
	for got < need {
		off := int64(c.ReadOffset) + int64(got)
		p := buf[got:c.ReadLen]
		fd, direct, err := f.fdFor(p, off)
		if err != nil {
			return err
		}
		n, err := f.pread(fd, p, off)
		switch {
		case err == nil && n == 0:
			return fmt.Errorf("read %s at %d: file ends at %d before the extent does: %w", f.path, off, f.size, io.ErrUnexpectedEOF)
		case err == nil:
			got += n
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EINVAL) && direct:
			if err := f.dropDirect(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("read %s at %d: %w", f.path, off, err)
		}
	}
	return nil
}

// fdFor picks the descriptor for a read of p at off.
func (f *File) fdFor(p []byte, off int64) (fd int, direct bool, err error) {
	if f.direct != nil && off%Alignment == 0 && len(p)%Alignment == 0 && addrAligned(p) {
		return int(f.direct.Fd()), true, nil
	}
	if f.buffered == nil {
		b, err := os.Open(f.path)
		if err != nil {
			return 0, false, fmt.Errorf("reopen %s without O_DIRECT: %w", f.path, err)
		}
		f.buffered = b
	}
	return int(f.buffered.Fd()), false, nil
}

// dropDirect switches to buffered reads for good.
func (f *File) dropDirect() error {
	if f.direct == nil {
		return nil
	}
	if f.buffered == nil {
		b, err := os.Open(f.path)
		if err != nil {
			return fmt.Errorf("reopen %s without O_DIRECT: %w", f.path, err)
		}
		f.buffered = b
	}
	err := f.direct.Close()
	f.direct = nil
	if err != nil {
		return fmt.Errorf("close O_DIRECT descriptor of %s: %w", f.path, err)
	}
	return nil
}

// Close closes the file's descriptors.
func (f *File) Close() error {
	var errs []error
	if f.direct != nil {
		errs = append(errs, f.direct.Close())
		f.direct = nil
	}
	if f.buffered != nil {
		errs = append(errs, f.buffered.Close())
		f.buffered = nil
	}
	return errors.Join(errs...)
}
