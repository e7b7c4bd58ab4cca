package memfdseal

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// newMemfd returns a memfd of size bytes sealed as a backend leaves it
// (F_SEAL_SHRINK | F_SEAL_GROW, as sdk.NewMemfd does).
func newMemfd(t *testing.T, size int) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("memfdseal-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "memfd:memfdseal-test")
	t.Cleanup(func() { f.Close() })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	return f
}

func seals(t *testing.T, f *os.File) int {
	t.Helper()
	s, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealEndsEveryWriteAndIsIdempotent(t *testing.T) {
	f := newMemfd(t, 4096)
	if _, err := f.WriteAt([]byte("weights"), 0); err != nil {
		t.Fatalf("write before the seal: %v", err)
	}
	if err := Seal(f); err != nil {
		t.Fatalf("Seal: %v", err)
	}
	if got, want := seals(t, f), unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|serveSeals; got != want {
		t.Errorf("seals %#x, want %#x", got, want)
	}
	if _, err := f.WriteAt([]byte("changed"), 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("write after the seal: %v, want EPERM", err)
	}
	if _, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EPERM) {
		t.Errorf("writable shared mapping after the seal: %v, want EPERM", err)
	}
	buf := make([]byte, 7)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "weights" {
		t.Errorf("read after the seal: %q, %v; want \"weights\"", buf, err)
	}
	if err := Seal(f); err != nil {
		t.Errorf("Seal of a sealed memfd: %v, want nil", err)
	}
}

func TestSealRefusesAWritableSharedMapping(t *testing.T) {
	f := newMemfd(t, 4096)
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	before := seals(t, f)
	err = Seal(f)
	if !errors.Is(err, ErrWritableMapping) {
		t.Fatalf("Seal with a writable shared mapping open: %v, want ErrWritableMapping", err)
	}
	if got := seals(t, f); got != before {
		t.Errorf("seals %#x after the refused Seal, want them unchanged (%#x)", got, before)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if err := Seal(f); err != nil {
		t.Errorf("Seal once the mapping is gone: %v", err)
	}
}

func TestSealRefusesAMemfdSealedByAnotherHand(t *testing.T) {
	f := newMemfd(t, 4096)
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL); err != nil {
		t.Fatal(err)
	}
	if err := Seal(f); err == nil || errors.Is(err, ErrWritableMapping) {
		t.Errorf("Seal of a memfd carrying F_SEAL_SEAL alone: %v, want an error other than ErrWritableMapping", err)
	}
}

func TestSealFutureWritesKeepsTheOpenMappingOnly(t *testing.T) {
	f := newMemfd(t, 4096)
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := SealFutureWrites(f); err != nil {
		t.Fatalf("SealFutureWrites with a writable mapping open: %v", err)
	}
	if got, want := seals(t, f), unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL; got != want {
		t.Errorf("seals %#x, want %#x", got, want)
	}
	copy(m, "kept")
	if _, err := f.WriteAt([]byte("new"), 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("write after SealFutureWrites: %v, want EPERM", err)
	}
	if _, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EPERM) {
		t.Errorf("new writable shared mapping after SealFutureWrites: %v, want EPERM", err)
	}
}
