package backendtest

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// file is a test input written into t.TempDir().
type file struct {
	path string
	data []byte
}

// writeFile writes size pseudo-random bytes (fixed seed) to a new file.
func writeFile(t *testing.T, name string, size int, seed uint64) file {
	t.Helper()
	data := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 'w', 'c'})
	_, _ = r.Read(data)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("write test file: %v", err)
	}
	return file{path: path, data: data}
}

// layout is a set of extents and the bytes each must produce.
type layout struct {
	files   []file
	extents []sdk.Extent
	// size is the allocation size that holds every extent.
	size uint64
}

// want returns the bytes extent i must place in the allocation.
func (l layout) want(i int) []byte {
	e := l.extents[i]
	for _, f := range l.files {
		if f.path == e.Path {
			return f.data[e.FileOffset : e.FileOffset+e.Length]
		}
	}
	panic("extent of an unknown file")
}

// total is the sum of extent lengths.
func (l layout) total() uint64 {
	var n uint64
	for _, e := range l.extents {
		n += e.Length
	}
	return n
}

// newLayout writes two files of odd sizes and maps them with several
// extents at unaligned file and destination offsets: both whole files
// (so a Digest must equal the file's sha256), a slice of each, a single
// byte and a file's tail.
func newLayout(t *testing.T) layout {
	a := writeFile(t, "a.safetensors", 3_000_017, 1)
	b := writeFile(t, "b.safetensors", 1_048_583, 2)
	ext := []sdk.Extent{
		{Path: a.path, FileOffset: 0, Length: uint64(len(a.data)), DestOffset: 13},
		{Path: b.path, FileOffset: 0, Length: uint64(len(b.data)), DestOffset: 3_004_123},
		{Path: a.path, FileOffset: 777_777, Length: 123_457, DestOffset: 4_100_001},
		{Path: b.path, FileOffset: 5, Length: 1, DestOffset: 4_300_003},
		{Path: a.path, FileOffset: 2_999_000, Length: 1_017, DestOffset: 4_300_101},
	}
	return layout{files: []file{a, b}, extents: ext, size: 4_400_007}
}

func sum(p []byte) [32]byte { return sha256.Sum256(p) }

// LoadData writes data to a file under t.TempDir, allocates size bytes
// (at least len(data)) on device 0 of b, loads the file at offset 0 and
// returns the allocation. Any failure ends the test.
func LoadData(t testing.TB, b sdk.Backend, size uint64, data []byte) sdk.AllocationID {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	id, _, err := b.Allocate(ctx, 0, size)
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if err := b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return id
}

// ExportData loads data into a new allocation of size bytes on device 0
// of b (LoadData), exports it and returns it and its handle, whose
// descriptor (when it has one) is closed at the test's cleanup: the
// source of a peer copy or an import. Any failure ends the test.
func ExportData(t testing.TB, b sdk.Backend, size uint64, data []byte) (sdk.AllocationID, sdk.Handle) {
	t.Helper()
	id := LoadData(t, b, size, data)
	h, err := b.Export(context.Background(), id)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if h.File != nil {
		t.Cleanup(func() { h.File.Close() })
	}
	return id, h
}

// FreeMemory returns the FreeMemory b's Devices reports for device
// ordinal (0 when the backend does not tell). A failed Devices, or a list
// without the ordinal, ends the test.
func FreeMemory(t testing.TB, b sdk.Backend, ordinal int) uint64 {
	t.Helper()
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	for _, d := range devs {
		if d.Ordinal == ordinal {
			return d.FreeMemory
		}
	}
	t.Fatalf("Devices lists no ordinal %d", ordinal)
	return 0
}
