package safetensors

import (
	"errors"
	"fmt"
)

// File is one validated safetensors file. It holds no open descriptor.
type File struct {
	// Path is the path the file was opened with.
	Path string
	// Size is the file size in bytes.
	Size int64
	// DataStart is the file offset of the data buffer, 8+N.
	DataStart int64
	// Header is the parsed header; its tensors are sorted by offset.
	Header *Header
	// RawHeader is the N header bytes exactly as stored, padding included.
	RawHeader []byte
	// Stamp is the open descriptor's identity and times when the header was
	// read; Changed compares the path against it.
	Stamp Stamp
}

// Open reads and validates the header of the safetensors file at path (see
// ParseHeader); it reads no tensor byte. A rule violation is a *FormatError
// with Path set; a path that is not a regular file (after following
// symlinks, as Hugging Face caches use them) is refused without blocking:
// a FIFO or device is never opened for a blocking read.
func Open(path string) (*File, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	h, raw, err := ParseHeader(f, st.Size())
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{Path: path, Size: st.Size(), DataStart: int64(prefixSize + h.Size), Header: h, RawHeader: raw,
		Stamp: stampOf(st)}, nil
}

// Tensor returns the tensor called name, and false when the file has none.
// It is a linear scan; build a map when looking up many names.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Header.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// Offset is the file offset of t's first byte (DataStart + Begin).
func (f *File) Offset(t TensorInfo) int64 { return f.DataStart + int64(t.Begin) }
