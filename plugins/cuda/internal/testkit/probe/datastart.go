package probe

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// maxHeaderBytes bounds a safetensors JSON header (the format's own limit
// is 100 MB).
const maxHeaderBytes = 100 << 20

// dataStart returns where the data buffer of a safetensors file starts (8
// + the header length in its first 8 bytes, little-endian) and the file's
// size. It checks only what the probe needs: that the header is plausible
// and lies inside the file. The probe loads whole data buffers and needs
// no tensor metadata, so it reads no more of the format than this (and, a
// plugin tool, does not import the core's strict reader).
func dataStart(path string) (start, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	var prefix [9]byte
	if _, err := io.ReadFull(f, prefix[:]); err != nil {
		return 0, 0, fmt.Errorf("%s: not a safetensors file: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(prefix[:8])
	if n < 2 || n > maxHeaderBytes || int64(8+n) > st.Size() || prefix[8] != '{' {
		return 0, 0, fmt.Errorf("%s: not a safetensors file (header length %d, file size %d)", path, n, st.Size())
	}
	return int64(8 + n), st.Size(), nil
}
