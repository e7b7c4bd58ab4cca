package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
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

// openSources opens files for reading, returns them with their sizes and
// total size, and closes them at the end of the test.
func openSources(t *testing.T, paths []string) ([]*os.File, []int64, int64) {
	t.Helper()
	var srcs []*os.File
	var sizes []int64
	var total int64
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		srcs, sizes, total = append(srcs, f), append(sizes, fi.Size()), total+fi.Size()
	}
	return srcs, sizes, total
}

func TestChunksOfLaysFilesEndToEndInMockSizedPieces(t *testing.T) {
	got := chunksOf([]int64{mockChunk + 5, 3})
	want := []fillChunk{{file: 0, off: 0, dest: 0, n: mockChunk}, {file: 0, off: mockChunk, dest: mockChunk, n: 5},
		{file: 1, off: 0, dest: mockChunk + 5, n: 3}}
	if len(got) != len(want) {
		t.Fatalf("chunksOf = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chunk %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The mock's bare pattern must copy the checkpoint exactly, or its rate
// means nothing.
func TestHostCopierCopiesEveryByte(t *testing.T) {
	paths, want := sourceFiles(t, 3<<20+123, mockChunk+mockBounce+7, 1)
	_, _, total := openSources(t, paths)
	dst, err := newShmFile(shmTestDir(t), total)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	extents, _, err := extentsOf(paths)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fill.Fill(context.Background(), hostCopier{dst.f}, uint64(total), extents, nil,
		fill.Options{Readers: 3, Buffers: 1, BufferBytes: mockBounce}); err != nil {
		t.Fatalf("fill: %v", err)
	}
	if !bytes.Equal(dst.data, want) {
		t.Fatal("the file's bytes differ from the sources'")
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
