package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
)

// Tensor is a tensor to write. Data must hold exactly the dtype × shape
// bytes; EncodeHeader ignores it.
type Tensor struct {
	Name  string
	DType DType
	Shape []uint64
	Data  []byte
}

// EncodeHeader orders tensors as the reference writer does (decreasing dtype rank,
// which is decreasing alignment, then name), assigns back-to-back offsets and
// returns the file prefix — the 8-byte little-endian header length followed
// by the JSON header ("__metadata__" first when metadata is not empty),
// padded with spaces so that the data starts at a multiple of 8 — and the
// tensors in data order. It fails on an empty or repeated name, an unknown
// dtype, or a shape whose size overflows.
func EncodeHeader(tensors []Tensor, metadata map[string]string) ([]byte, []TensorInfo, error) {
	order := slices.Clone(tensors)
	slices.SortFunc(order, func(a, b Tensor) int {
		if c := cmp.Compare(b.DType.Rank(), a.DType.Rank()); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	seen := make(map[string]struct{}, len(order))
	for _, t := range order {
		if _, dup := seen[t.Name]; dup {
			return nil, nil, fmt.Errorf("safetensors: tensor %q given twice", t.Name)
		}
		seen[t.Name] = struct{}{}
	}
	infos := make([]TensorInfo, len(order))
	var buf bytes.Buffer
	buf.Write(make([]byte, 8))
	buf.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(&buf, k)
			buf.WriteByte(':')
			writeJSONString(&buf, metadata[k])
		}
		buf.WriteByte('}')
	}
	var offset uint64
	for i, t := range order {
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, nil, fmt.Errorf("safetensors: invalid tensor name %q", t.Name)
		}
		size, err := ByteSize(t.DType, t.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
		}
		infos[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), Begin: offset, End: offset + size}
		offset += size
		if len(metadata) > 0 || i > 0 {
			buf.WriteByte(',')
		}
		writeJSONString(&buf, t.Name)
		fmt.Fprintf(&buf, `:{"dtype":%q,"shape":[`, string(t.DType))
		for j, d := range t.Shape {
			if j > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprintf(&buf, "%d", d)
		}
		fmt.Fprintf(&buf, `],"data_offsets":[%d,%d]}`, infos[i].Begin, infos[i].End)
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	out := buf.Bytes()
	binary.LittleEndian.PutUint64(out, uint64(len(out)-8))
	return out, infos, nil
}

// Encode writes a complete safetensors file to w (see EncodeHeader). Each tensor's
// Data must be exactly its dtype × shape bytes.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	prefix, infos, err := EncodeHeader(tensors, metadata)
	if err != nil {
		return err
	}
	data := make(map[string][]byte, len(tensors))
	for _, t := range tensors {
		data[t.Name] = t.Data
	}
	for _, info := range infos {
		if got := uint64(len(data[info.Name])); got != info.Len() {
			return fmt.Errorf("safetensors: tensor %q: %d data bytes, %s %v needs %d", info.Name, got, info.DType, info.Shape, info.Len())
		}
	}
	if _, err := w.Write(prefix); err != nil {
		return fmt.Errorf("safetensors: write header: %w", err)
	}
	for _, info := range infos {
		if _, err := w.Write(data[info.Name]); err != nil {
			return fmt.Errorf("safetensors: write tensor %q: %w", info.Name, err)
		}
	}
	return nil
}

// WriteFile writes tensors and metadata (nil: none) as a safetensors file
// at path with mode 0644, replacing any file there. It builds the file in
// memory: for checkpoints larger than memory, stream with EncodeHeader and
// the tensor bytes in its order (as core/safetensors/synth does). See
// Encode.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	var buf bytes.Buffer
	if err := Encode(&buf, tensors, metadata); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// writeJSONString appends s as a JSON string.
func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // marshalling a string cannot fail
	buf.Write(b)
}
