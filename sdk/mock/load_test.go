package mock

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
)

// TestWriteChunkFullFolderIsOutOfMemory checks the mapping of a real
// ENOSPC: /dev/full fails every write with it, as a full /dev/shm does
// (a test cannot mount a tiny tmpfs everywhere it runs).
func TestWriteChunkFullFolderIsOutOfMemory(t *testing.T) {
	fd, err := unix.Open("/dev/full", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/full: %v", err)
	}
	defer unix.Close(fd)
	err = writeChunk(fd, make([]byte, 4096), 8192, "/dev/shm/wcache-mock-0/1-0123456789abcdef-1.shm")
	if !errors.Is(err, sdk.ErrOutOfMemory) {
		t.Fatalf("writeChunk to a full device = %v, want ErrOutOfMemory", err)
	}
	for _, want := range []string{"at 8192 of /dev/shm/wcache-mock-0/1-0123456789abcdef-1.shm", "/dev/shm/wcache-mock-0 is full"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestWriteChunkOtherFailuresStayUntyped(t *testing.T) {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	err = writeChunk(fd, make([]byte, 16), 0, "x.shm")
	if !errors.Is(err, unix.EBADF) || errors.Is(err, sdk.ErrOutOfMemory) {
		t.Fatalf("writeChunk to a read-only fd = %v, want EBADF and not ErrOutOfMemory", err)
	}
}
