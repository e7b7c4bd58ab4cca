package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/wcache/wcache/sdk/fill"
)

// shmTestDir is a private folder on /dev/shm when there is one (the file
// system the probes are meant for), else a temporary folder.
func shmTestDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "wcache-bench-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return t.TempDir()
}

// sourceFiles writes files of the given sizes with random bytes and
// returns their paths and their concatenation.
func sourceFiles(t *testing.T, sizes ...int) ([]string, []byte) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	var all []byte
	for i, n := range sizes {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "shard-"+string(rune('a'+i)))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		paths, all = append(paths, p), append(all, b...)
	}
	return paths, all
}

func TestInChunksCoversEveryByteOnce(t *testing.T) {
	const total = 3*mockChunk + 5
	seen := make([]atomic.Int32, total/pageSize+1)
	var pieces atomic.Int32
	if err := inChunks(total, 3, func(off, n int64) error {
		if off%mockChunk != 0 || n > mockChunk || off+n > total {
			t.Errorf("piece %d+%d", off, n)
		}
		for p := off; p < off+n; p += pageSize {
			seen[p/pageSize].Add(1)
		}
		pieces.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("page %d covered %d times", i, c)
		}
	}
	if pieces.Load() != 4 {
		t.Errorf("%d pieces, want 4", pieces.Load())
	}
	if err := inChunks(total, 2, func(off, n int64) error { return os.ErrInvalid }); !errors.Is(err, os.ErrInvalid) {
		t.Errorf("a failing piece: err = %v", err)
	}
}

// The mock's bare pattern must copy the checkpoint exactly, or its rate
// means nothing.
func TestHostCopierCopiesEveryByte(t *testing.T) {
	paths, want := sourceFiles(t, 3<<20+123, mockChunk+mockBounce+7, 1)
	extents, total, err := extentsOf(paths)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fillFresh("test", shmTestDir(t), int64(total), func(f *os.File, data []byte) error {
		if _, err := fill.Fill(context.Background(), fill.WriterAt{W: f}, total, extents, nil,
			fill.Options{Readers: 3, Buffers: 1, BufferBytes: mockBounce}); err != nil {
			return err
		}
		if !bytes.Equal(data, want) {
			t.Error("the file's bytes differ from the sources'")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestFreshFillsTimeAndRemoveTheirFiles(t *testing.T) {
	dir := shmTestDir(t)
	paths, _ := sourceFiles(t, 16<<20, 5<<20+1)
	const total = 21<<20 + 1
	pages := uint64(total / pageSize)
	check := func(name string, tm fillTiming, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tm.Bytes != total || tm.Fill <= 0 {
			t.Errorf("%s: %+v", name, tm)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s left %d files in %s", name, len(left), dir)
		}
	}
	pat, err := mockPattern(dir, paths, 2)
	check("mockPattern", pat, err)
	fm, err := freshMemcpy(dir, total, 2)
	check("freshMemcpy", fm, err)
	fresh, over, err := freshWrite(dir, total, 2)
	check("freshWrite", fresh, err)
	check("freshWrite again", over, err)
	// Faulting pages in through a mapping counts about one fault per
	// page; writing through the file does not (only the workers' buffers
	// fault in).
	if fm.MinorFaults < pages/2 {
		t.Errorf("memcpy into a fresh mapping took %d faults for %d pages", fm.MinorFaults, pages)
	}
	if fresh.MinorFaults > pages/4 {
		t.Errorf("pwrite into a fresh file took %d faults for %d pages", fresh.MinorFaults, pages)
	}
}

func TestFreshFillsFailOnAMissingFolder(t *testing.T) {
	paths, _ := sourceFiles(t, 4096)
	missing := filepath.Join(t.TempDir(), "absent")
	if _, err := mockPattern(missing, paths, 1); err == nil {
		t.Error("mockPattern into a missing folder succeeded")
	}
	if _, _, err := freshWrite(missing, 4096, 1); err == nil {
		t.Error("freshWrite into a missing folder succeeded")
	}
	if _, err := mockPattern(t.TempDir(), []string{filepath.Join(missing, "x")}, 1); err == nil {
		t.Error("mockPattern of a missing source succeeded")
	}
}
