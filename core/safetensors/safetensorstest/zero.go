package safetensorstest

import (
	"fmt"
	"os"

	"github.com/wcache/wcache/core/safetensors"
)

// ZeroTensor overwrites with zeros, in place, the bytes of the i-th
// non-empty tensor of the file at path in data order (i < 0 counts from
// the end) and returns its name: the header, and so the checkpoint digest,
// stays the same while the weights change, as with a fine-tune that keeps
// the base model's shapes.
func ZeroTensor(path string, i int) (string, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return "", err
	}
	var ts []safetensors.TensorInfo
	for _, t := range f.Header.Tensors {
		if t.Len() > 0 {
			ts = append(ts, t)
		}
	}
	if i < 0 {
		i += len(ts)
	}
	if i < 0 || i >= len(ts) {
		return "", fmt.Errorf("%s has %d non-empty tensors, no tensor %d", path, len(ts), i)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	_, err = w.WriteAt(make([]byte, ts[i].Len()), f.Offset(ts[i]))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return ts[i].Name, err
}
