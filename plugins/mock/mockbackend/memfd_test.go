package mockbackend

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// newMemfdBackend is a mock with the default handle kind and a folder
// that must never be created.
func newMemfdBackend(t *testing.T) *Backend {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Memory = 64 << 20
	cfg.Dir = filepath.Join(t.TempDir(), "never")
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// exportLoaded loads n random bytes into a fresh allocation on device 0
// of b and exports it; the handle's descriptor is closed at cleanup.
func exportLoaded(t *testing.T, b *Backend, n int) (sdk.AllocationID, uint64, []byte, sdk.Handle) {
	t.Helper()
	ctx := context.Background()
	path, data := randomFile(t, n)
	id, size, err := b.Allocate(ctx, 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil); err != nil {
		t.Fatal(err)
	}
	h, err := b.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if h.File != nil {
		t.Cleanup(func() { h.File.Close() })
	}
	return id, size, data, h
}

// TestMemfdIsTheDefaultSealedAndNamedNowhere: a memfd allocation is
// exported as a sealed descriptor of the allocation's size, holding the
// loaded bytes, and nothing appears in the folder.
func TestMemfdIsTheDefaultSealedAndNamedNowhere(t *testing.T) {
	b := newMemfdBackend(t)
	ctx := context.Background()
	if info, _ := b.Info(ctx); len(info.HandleKinds) != 1 || info.HandleKinds[0] != names.KindMemfd {
		t.Fatalf("handle kinds %v, want [memfd]", info.HandleKinds)
	}
	id, size, data, h := exportLoaded(t, b, 100_000)
	if h.Kind != names.KindMemfd || h.File == nil || len(h.Data) != 0 || h.Size != size {
		t.Fatalf("handle %+v, want a memfd of %d bytes with a File and no data", h, size)
	}
	seals, err := unix.FcntlInt(h.File.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals != sdk.MemfdSeals {
		t.Errorf("seals %#x (%v), want %#x", seals, err, sdk.MemfdSeals)
	}
	if err := unix.Ftruncate(int(h.File.Fd()), 4096); !errors.Is(err, unix.EPERM) {
		t.Errorf("shrinking the exported memfd: %v, want EPERM (sealed)", err)
	}
	m, err := unix.Mmap(int(h.File.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if !bytes.Equal(m[:len(data)], data) {
		t.Error("the exported memfd does not hold the loaded bytes")
	}
	if _, err := os.Stat(b.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the posix-shm folder %s exists (%v): memfd must name nothing", b.Dir(), err)
	}
	// The memory outlives the allocation while a holder has it.
	if err := b.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m[:len(data)], data) {
		t.Error("the mapping changed after Free")
	}
}

// TestMemfdImportAdoptsAndChecks: an imported memfd is the same memory,
// exportable again and not charged; a descriptor that is not a sealed
// memfd of the handle's size is refused.
func TestMemfdImportAdoptsAndChecks(t *testing.T) {
	b := newMemfdBackend(t)
	other := newMemfdBackend(t)
	ctx := context.Background()
	_, size, data, h := exportLoaded(t, b, 8192)
	imp, err := other.Import(ctx, 0, h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := other.Read(ctx, imp, 0, uint64(len(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the import: %v", err)
	}
	devs, _ := other.Devices(ctx)
	if devs[0].FreeMemory != devs[0].TotalMemory {
		t.Errorf("an adopted memfd is charged: %d of %d free", devs[0].FreeMemory, devs[0].TotalMemory)
	}
	again, err := other.Export(ctx, imp)
	if err != nil || again.Kind != names.KindMemfd || again.Size != size {
		t.Fatalf("export of an adopted memfd: %+v, %v", again, err)
	}
	again.File.Close()

	plain, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_ = plain.Truncate(int64(size))
	for name, bad := range map[string]sdk.Handle{
		"no descriptor":   {Kind: names.KindMemfd, Size: size},
		"not a memfd":     {Kind: names.KindMemfd, Size: size, File: plain},
		"size differs":    {Kind: names.KindMemfd, Size: size * 2, File: h.File},
		"unknown kind":    {Kind: "x-acme-dmabuf", Size: size, File: h.File},
		"zero-size memfd": {Kind: names.KindMemfd, Size: 0, File: h.File},
	} {
		_, err := other.Import(ctx, 0, bad)
		want := sdk.ErrInvalidArgument
		if bad.Kind != names.KindMemfd {
			want = sdk.ErrUnsupported
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: Import error %v, want %v", name, err, want)
		}
	}
}
