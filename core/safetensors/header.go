package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"
)

// MaxHeaderSize is the largest header length N accepted (100 MB), as in the
// reference implementation.
const MaxHeaderSize = 100_000_000

// prefixSize is the size of the little-endian u64 header length.
const prefixSize = 8

// TensorInfo describes one tensor of a file. Begin and End are relative to
// the start of the data buffer (file offset 8+N); End is exclusive.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []uint64
	Begin uint64
	End   uint64
}

// Len is the tensor's size in bytes (End − Begin).
func (t TensorInfo) Len() uint64 { return t.End - t.Begin }

// Header is a parsed and validated safetensors header.
type Header struct {
	// Size is N, the header length in bytes (padding included).
	Size uint64
	// Tensors are sorted by Begin (then End, then Name); they tile the
	// data buffer from 0 without overlap or hole.
	Tensors []TensorInfo
	// Metadata is the "__metadata__" map; nil when the key is absent or null.
	Metadata map[string]string
}

// DataSize is the length of the data buffer: the End of the last tensor,
// or 0 when the file holds no tensor.
func (h *Header) DataSize() uint64 {
	if len(h.Tensors) == 0 {
		return 0
	}
	return h.Tensors[len(h.Tensors)-1].End
}

// ParseHeader reads and validates the header of a safetensors file of
// fileSize bytes readable through r. It returns the parsed header and the raw
// header bytes (the N bytes after the length prefix, padding included).
//
// It reads exactly 8+N bytes and never a tensor byte. It allocates nothing
// proportional to N before N has been checked against MaxHeaderSize and
// fileSize. Every broken rule is a *FormatError (with an empty Path) wrapping
// the rule's sentinel; an I/O error from r is returned wrapped as is.
func ParseHeader(r io.ReaderAt, fileSize int64) (*Header, []byte, error) {
	if fileSize < prefixSize {
		return nil, nil, formatErr(ErrHeaderTooSmall, "",
			fmt.Sprintf("file is %d bytes, shorter than the %d-byte length prefix", fileSize, prefixSize))
	}
	var prefix [prefixSize]byte
	if err := readFullAt(r, prefix[:], 0); err != nil {
		return nil, nil, fmt.Errorf("safetensors: read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderSize {
		return nil, nil, formatErr(ErrHeaderTooLarge, "",
			fmt.Sprintf("header length %d exceeds the limit of %d bytes", n, MaxHeaderSize))
	}
	stop, carry := bits.Add64(n, prefixSize, 0)
	if carry != 0 || stop > uint64(fileSize) {
		return nil, nil, formatErr(ErrInvalidHeaderLength, "",
			fmt.Sprintf("header length %d runs past the end of a %d-byte file (%s)", n, fileSize, truncatedHint))
	}
	raw := make([]byte, n)
	if err := readFullAt(r, raw, prefixSize); err != nil {
		return nil, nil, fmt.Errorf("safetensors: read %d-byte header: %w", n, err)
	}
	tensors, metadata, err := decodeHeader(raw)
	if err != nil {
		return nil, nil, err
	}
	if err := validateLayout(tensors, n, fileSize); err != nil {
		return nil, nil, err
	}
	return &Header{Size: n, Tensors: tensors, Metadata: metadata}, raw, nil
}

// readFullAt fills p from r at off. io.ReaderAt may return io.EOF together
// with a full read; a short read is io.ErrUnexpectedEOF.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("read %d of %d bytes at offset %d: %w", n, len(p), off, io.ErrUnexpectedEOF)
	}
	return err
}

// ByteSize is the number of bytes of a tensor of dtype d and the given
// shape, computed with checked arithmetic as the reference does: the element
// count and the bit count must fit in a u64 (else ErrOverflow) and the bit
// count must be a whole number of bytes (else ErrMisaligned). A rank-0 shape
// is one element; a 0 anywhere in the shape is an empty tensor. An unknown
// dtype is ErrUnknownDType.
func ByteSize(d DType, shape []uint64) (uint64, error) {
	size, detail, sentinel := byteSize(d, shape)
	if sentinel != nil {
		return 0, fmt.Errorf("%s: %w", detail, sentinel)
	}
	return size, nil
}

// byteSize is ByteSize returning the rule's sentinel and a description
// separately, so that callers can build a *FormatError without repeating it.
func byteSize(d DType, shape []uint64) (uint64, string, error) {
	info, ok := dtypeTable(d)
	if !ok {
		return 0, fmt.Sprintf("dtype %q", d), ErrUnknownDType
	}
	elements := uint64(1)
	for _, dim := range shape {
		hi, lo := bits.Mul64(elements, dim)
		if hi != 0 {
			return 0, fmt.Sprintf("the element count of %s %s does not fit in 64 bits", d, shapeString(shape)), ErrOverflow
		}
		elements = lo
	}
	hi, nbits := bits.Mul64(elements, uint64(info.bits))
	if hi != 0 {
		return 0, fmt.Sprintf("the bit count of %s %s (%d elements) does not fit in 64 bits", d, shapeString(shape), elements), ErrOverflow
	}
	if nbits%8 != 0 {
		return 0, fmt.Sprintf("%s %s is %d bits, not a whole number of bytes", d, shapeString(shape), nbits), ErrMisaligned
	}
	return nbits / 8, "", nil
}

// shapeString formats a shape as [a, b, c].
func shapeString(shape []uint64) string {
	b := make([]byte, 0, 2+len(shape)*6)
	b = append(b, '[')
	for i, d := range shape {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendUint(b, d, 10)
	}
	return string(append(b, ']'))
}
