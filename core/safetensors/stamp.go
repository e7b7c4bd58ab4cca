package safetensors

import (
	"fmt"
	"os"
	"syscall"
)

// Stamp identifies the file a header was read from and the state it was in:
// device, inode, size, modification and status-change times. A file
// replaced by a rename has another inode; one written in place has another
// size, mtime or ctime (ctime cannot be set back by a user, unlike mtime).
type Stamp struct {
	Dev, Ino uint64
	Size     int64
	MtimeNs  int64
	CtimeNs  int64
}

// stampOf is the Stamp of a stat result (zero on a system without
// syscall.Stat_t, where Changed then compares the size only).
func stampOf(st os.FileInfo) Stamp {
	s := Stamp{Size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.Dev, s.Ino = uint64(sys.Dev), sys.Ino
		s.MtimeNs = sys.Mtim.Sec*1e9 + sys.Mtim.Nsec
		s.CtimeNs = sys.Ctim.Sec*1e9 + sys.Ctim.Nsec
	}
	return s
}

// ChangedError says that a checkpoint file is no longer the file whose
// header was read.
type ChangedError struct {
	Path string
	// What changed: "replaced (inode a -> b)", "size a -> b", "modified".
	What string
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("checkpoint file %s changed since its header was read: %s", e.Path, e.What)
}

// Changed stats f.Path now (following symlinks, as Open does) and returns a
// *ChangedError when it is not the file, in the state, that Open read:
// removed, replaced, resized or written to. Call it after the file's bytes
// were read by whoever reads them by path: if it reports nothing, the bytes
// read were the bytes whose header was digested (unless the file was
// written within the file system's timestamp granularity of the header
// read without a change of size, or changed and its times set back by
// root).
func (f *File) Changed() error {
	st, err := os.Stat(f.Path)
	if err != nil {
		return &ChangedError{Path: f.Path, What: fmt.Sprintf("no longer there (%v)", err)}
	}
	return f.compare(stampOf(st))
}

// OpenUnchanged opens f.Path again as Open does (a regular file, without
// blocking) and returns the descriptor if it is the file, in the state,
// whose header was read; else a *ChangedError. Bytes read through it are
// the checkpoint's bytes, whatever happens to the path afterwards.
func (f *File) OpenUnchanged() (*os.File, error) {
	fd, st, err := openRegular(f.Path)
	if err != nil {
		return nil, &ChangedError{Path: f.Path, What: fmt.Sprintf("cannot be opened again (%v)", err)}
	}
	if err := f.compare(stampOf(st)); err != nil {
		fd.Close()
		return nil, err
	}
	return fd, nil
}

// compare returns a *ChangedError when now is not f.Stamp.
func (f *File) compare(now Stamp) error {
	was := f.Stamp
	switch {
	case now.Dev != was.Dev || now.Ino != was.Ino:
		return &ChangedError{Path: f.Path, What: fmt.Sprintf("replaced (device %d inode %d, was device %d inode %d)", now.Dev, now.Ino, was.Dev, was.Ino)}
	case now.Size != was.Size:
		return &ChangedError{Path: f.Path, What: fmt.Sprintf("size %d, was %d", now.Size, was.Size)}
	case now.MtimeNs != was.MtimeNs || now.CtimeNs != was.CtimeNs:
		return &ChangedError{Path: f.Path, What: "written to (modification or change time differs)"}
	}
	return nil
}

// StampOf is the Stamp of a stat result (following symlinks or not, as
// the caller statted): how clients compare their files with the identity
// a daemon recorded.
func StampOf(st os.FileInfo) Stamp { return stampOf(st) }
