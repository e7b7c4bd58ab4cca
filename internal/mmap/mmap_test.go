package mmap

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shm")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPathReadSeesTheFile(t *testing.T) {
	want := []byte("weights in shared memory")
	path := writeFile(t, want)
	for _, check := range []Check{Any, Exact} {
		m, err := Path(path, uint64(len(want)), Read, check)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m, want) {
			t.Errorf("check %d: mapped %q, want %q", check, m, want)
		}
		if err := Unmap(m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPathReadWriteReachesTheFile(t *testing.T) {
	path := writeFile(t, make([]byte, 8))
	m, err := Path(path, 8, ReadWrite, Exact)
	if err != nil {
		t.Fatal(err)
	}
	copy(m, "abcdefgh")
	if err := Unmap(m); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "abcdefgh" {
		t.Errorf("file holds %q after writing through the mapping", got)
	}
}

func TestPathRefusesASymlink(t *testing.T) {
	path := writeFile(t, []byte("target"))
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Path(link, 6, Read, Any); !errors.Is(err, unix.ELOOP) {
		t.Errorf("mapping through a symlink: %v, want ELOOP", err)
	}
}

func TestPathExactRefusesAnotherSizeOrType(t *testing.T) {
	path := writeFile(t, []byte("12345"))
	if _, err := Path(path, 4, Read, Exact); err == nil {
		t.Error("mapped a 5-byte file as 4 bytes with Exact")
	}
	if _, err := Path(t.TempDir(), 4, Read, Exact); err == nil {
		t.Error("mapped a directory")
	}
	m, err := Path(path, 4, Read, Any)
	if err != nil {
		t.Fatalf("Any refused a prefix of a file: %v", err)
	}
	if string(m) != "1234" {
		t.Errorf("mapped %q", m)
	}
	_ = Unmap(m)
}

func TestEmptyAndOversized(t *testing.T) {
	m, err := Path(filepath.Join(t.TempDir(), "absent"), 0, Read, Exact)
	if err != nil || m == nil || len(m) != 0 {
		t.Errorf("size 0: %v, %v; want an empty slice", m, err)
	}
	if err := Unmap(m); err != nil {
		t.Errorf("Unmap of an empty slice: %v", err)
	}
	if _, err := FD(0, 1<<63, Read); err == nil {
		t.Error("mapped 2^63 bytes")
	}
}

func TestFDReadOnlyDescriptorCannotMapWritable(t *testing.T) {
	path := writeFile(t, []byte("read only"))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := FD(int(f.Fd()), 9, ReadWrite); !errors.Is(err, unix.EACCES) {
		t.Errorf("writable mapping of an O_RDONLY descriptor: %v, want EACCES", err)
	}
	m, err := FD(int(f.Fd()), 9, Read)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(m)
	if string(m) != "read only" {
		t.Errorf("mapped %q", m)
	}
}
