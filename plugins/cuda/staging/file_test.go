package staging

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// alignedBuf returns an Alignment-aligned buffer of n bytes outside the Go
// heap, as pinned staging memory is.
func alignedBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func writeRandom(t *testing.T, size int, seed uint64) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{byte(seed), 9}).Read(data)
	// Not under /dev/shm: the test dir's filesystem decides O_DIRECT.
	path := filepath.Join(t.TempDir(), "f.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// copyExtent runs the plan for one extent through f into dst, as Load does
// with pinned buffers and host-to-device copies.
func copyExtent(t *testing.T, f *File, buf, dst []byte, offset, length, dest uint64) error {
	t.Helper()
	for _, c := range Plan(offset, length, dest, len(buf), f.Alignment()) {
		clear(buf) // stale bytes must never leak into the result
		if err := f.ReadChunk(buf, c); err != nil {
			return err
		}
		copy(dst[c.Dest:c.Dest+uint64(c.Len)], buf[c.Skip:c.Skip+c.Len])
	}
	return nil
}

func TestReadRandomExtentsByteEqual(t *testing.T) {
	const size = 1<<20 + 4093 // not a multiple of the block size
	path, data := writeRandom(t, size, 1)
	r := rand.New(rand.NewPCG(3, 4))
	for _, direct := range []bool{true, false} {
		f, err := Open(path, direct)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tryDirect=%v: O_DIRECT in use: %v", direct, f.Direct())
		for i := range 300 {
			bufSize := Alignment * (1 + r.IntN(20))
			buf := alignedBuf(t, bufSize)
			offset := r.Uint64N(size)
			length := r.Uint64N(size - offset + 1)
			switch i % 5 {
			case 0: // the tail up to end of file
				length = size - offset
			case 1: // tiny
				length = min(length, 3)
			}
			dest := r.Uint64N(5000)
			dst := make([]byte, dest+length+100)
			if err := copyExtent(t, f, buf, dst, offset, length, dest); err != nil {
				t.Fatalf("extent [%d,+%d): %v", offset, length, err)
			}
			if !bytes.Equal(dst[dest:dest+length], data[offset:offset+length]) {
				t.Fatalf("extent [%d,+%d) with %d-byte buffer: bytes differ", offset, length, bufSize)
			}
			if !bytes.Equal(dst[:dest], make([]byte, dest)) || !bytes.Equal(dst[dest+length:], make([]byte, 100)) {
				t.Fatalf("extent [%d,+%d): bytes written outside the destination range", offset, length)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEINVALFallsBackToBuffered(t *testing.T) {
	path, data := writeRandom(t, 300_001, 2)
	// Open buffered, then pose a second descriptor as the O_DIRECT one, so
	// the test does not depend on the filesystem supporting O_DIRECT.
	f, err := Open(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.direct, err = os.Open(path); err != nil {
		t.Fatal(err)
	}
	f.buffered.Close()
	f.buffered = nil
	if !f.Direct() || f.Alignment() != Alignment {
		t.Fatal("setup: file does not pose as O_DIRECT")
	}
	calls := 0
	f.pread = func(fd int, p []byte, off int64) (int, error) {
		calls++
		if f.direct != nil && fd == int(f.direct.Fd()) {
			return 0, unix.EINVAL
		}
		return unix.Pread(fd, p, off)
	}
	buf := alignedBuf(t, 8*Alignment)
	dst := make([]byte, len(data))
	if err := copyExtent(t, f, buf, dst, 10, uint64(len(data))-10, 10); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst[10:], data[10:]) {
		t.Fatal("bytes differ after the fallback")
	}
	if f.Direct() {
		t.Fatal("still O_DIRECT after EINVAL")
	}
	if calls < 2 {
		t.Fatalf("pread called %d times; the refused read was not retried", calls)
	}
}

func TestShortReadsAndUnalignedBuffer(t *testing.T) {
	path, data := writeRandom(t, 200_000, 3)
	f, err := Open(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(5, 6))
	f.pread = func(fd int, p []byte, off int64) (int, error) {
		// Return a random prefix, as a signal-interrupted or network read may.
		n := 1 + r.IntN(len(p))
		return unix.Pread(fd, p[:n], off)
	}
	for _, shift := range []int{0, 1, 512} {
		buf := alignedBuf(t, 4*Alignment+shift)[shift:]
		dst := make([]byte, len(data))
		if err := copyExtent(t, f, buf, dst, 4097, 150_000, 4097); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst[4097:4097+150_000], data[4097:4097+150_000]) {
			t.Fatalf("buffer shifted by %d: bytes differ", shift)
		}
	}
}

func TestExtentPastEndOfFile(t *testing.T) {
	path, _ := writeRandom(t, 10_000, 4)
	for _, direct := range []bool{true, false} {
		f, err := Open(path, direct)
		if err != nil {
			t.Fatal(err)
		}
		buf := alignedBuf(t, 4*Alignment)
		dst := make([]byte, 20_000)
		err = copyExtent(t, f, buf, dst, 9_999, 2, 0)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("direct=%v: extent past EOF = %v, want io.ErrUnexpectedEOF", direct, err)
		}
		f.Close()
	}
}

func TestOpenErrors(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "missing"), true)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open(missing) = %v, want fs.ErrNotExist", err)
	}
	if _, err := Open(t.TempDir(), false); err == nil {
		t.Fatal("Open(directory) succeeded")
	}
}

func TestReadChunkBufferTooSmall(t *testing.T) {
	path, _ := writeRandom(t, 10_000, 5)
	f, err := Open(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.ReadChunk(make([]byte, 10), Chunk{ReadLen: 20, Len: 20}); err == nil {
		t.Fatal("ReadChunk into a too-small buffer succeeded")
	}
}
