package safetensorstest

import (
	"encoding/binary"
	"io"

	"github.com/wcache/wcache/core/safetensors"
)

// Tensor is a tensor to write (safetensors.Tensor).
type Tensor = safetensors.Tensor

// Layout is safetensors.EncodeHeader: the file prefix and the tensors in
// data order, as the reference writer lays them out.
func Layout(tensors []Tensor, metadata map[string]string) ([]byte, []safetensors.TensorInfo, error) {
	return safetensors.EncodeHeader(tensors, metadata)
}

// Encode is safetensors.Encode.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	return safetensors.Encode(w, tensors, metadata)
}

// WriteFile writes tensors (no metadata) as a safetensors file at path,
// replacing any file there (safetensors.WriteFile).
func WriteFile(path string, tensors []Tensor) error {
	return safetensors.WriteFile(path, tensors, nil)
}

// WriteFileMetadata is WriteFile with a "__metadata__" map.
func WriteFileMetadata(path string, tensors []Tensor, metadata map[string]string) error {
	return safetensors.WriteFile(path, tensors, metadata)
}

// RawFile returns the bytes of a file made of the little-endian length of
// header, header itself and data, with no check at all: the way to build
// malformed files.
func RawFile(header string, data []byte) []byte {
	out := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}
