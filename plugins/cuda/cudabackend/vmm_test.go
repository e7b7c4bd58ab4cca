package cudabackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// TestVMMDescriptorHandles: with cuda-vmm-fd, Export hands out a fresh
// descriptor per call, an import of it is adoptable (it reads the bytes,
// exports again) and keeps the memory after the exporter's id is freed;
// imports cannot write: every import is mapped read-only (the fake
// driver's log of cuMemSetAccess: the backend's own allocations
// read-write, its imports read) and a Load into one is refused; bad
// handles are refused by name; freeing everything gives the device memory
// back.
func TestVMMDescriptorHandles(t *testing.T) {
	accessLog := filepath.Join(t.TempDir(), "access.log")
	cfg := fakeConfig(t, gputest.FakeOptions{NoManagement: true, Env: map[string]string{"FAKECUDA_ACCESS_LOG": accessLog}})
	cfg.Handle = HandleVMMFD
	b := newBackend(t, cfg)
	ctx := context.Background()
	if info, _ := b.Info(ctx); len(info.HandleKinds) != 1 || info.HandleKinds[0] != HandleVMMFD {
		t.Fatalf("Info.HandleKinds = %v, want [%s]", info.HandleKinds, HandleVMMFD)
	}
	path, data := writeFile(t, 300_000, 3)
	// 3 MiB + 1: two 2 MiB granules on the device, exactly the size asked for.
	const size = 3<<20 + 1
	id := loadFile(t, b, path, len(data), size, 100)
	if free := backendtest.FreeMemory(t, b, 0); free != fakeMemory-4<<20 {
		t.Fatalf("free memory %d after a %d-byte allocation, want %d (rounded to the 2 MiB granularity)", free, size, fakeMemory-4<<20)
	}
	h, err := b.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer h.File.Close()
	if h.Kind != HandleVMMFD || h.File == nil || len(h.Data) != 0 || h.Size != size {
		t.Fatalf("Export = %s, file %v, %d bytes of data, size %d", h.Kind, h.File, len(h.Data), h.Size)
	}
	again, err := b.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if again.File.Fd() == h.File.Fd() {
		t.Fatal("second Export returned the same descriptor, want a fresh one")
	}
	again.File.Close()

	for name, bad := range map[string]sdk.Handle{
		"no descriptor": {Kind: HandleVMMFD, Size: size},
		"too large":     {Kind: HandleVMMFD, Size: 5 << 20, File: h.File},
		"zero size":     {Kind: HandleVMMFD, File: h.File},
		"not VMM":       {Kind: HandleVMMFD, Size: size, File: os.Stdin},
	} {
		if _, err := b.Import(ctx, 0, bad); !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("Import (%s) = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := b.Import(ctx, 0, sdk.Handle{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: size}); !errors.Is(err, sdk.ErrUnsupported) {
		t.Errorf("Import of posix-shm = %v, want ErrUnsupported", err)
	}
	// A backend exporting cuda-ipc (the default: attach --verify's plugin)
	// imports cuda-vmm-fd too, adoptable as well.
	ipcCfg := cfg
	ipcCfg.Handle = HandleIPC
	other := newBackend(t, ipcCfg)
	oid, err := other.Import(ctx, 0, h)
	if err != nil {
		t.Fatalf("Import of cuda-vmm-fd by a cuda-ipc backend: %v", err)
	}
	if got, err := other.Read(ctx, oid, 100, uint64(len(data))); err != nil || string(got) != string(data) {
		t.Fatalf("Read through the cuda-ipc backend's import: %v", err)
	}
	if re, err := other.Export(ctx, oid); err != nil || re.Kind != HandleVMMFD || re.File == nil {
		t.Fatalf("Export of the import by the cuda-ipc backend = %+v, %v; want a cuda-vmm-fd descriptor", re, err)
	} else {
		re.File.Close()
	}
	if err := other.Free(ctx, oid); err != nil {
		t.Fatal(err)
	}

	alias, err := b.Import(ctx, 0, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := b.Read(ctx, alias, 100, uint64(len(data)))
	if err != nil || string(got) != string(data) {
		t.Fatalf("Read through the import after freeing the original: %v (equal=%v)", err, string(got) == string(data))
	}
	// Imports cannot write: a Load into one is refused, the bytes stay;
	// adoptable still: it exports again.
	if err := b.Load(ctx, alias, []sdk.Extent{{Path: path, Length: 1000, DestOffset: 0}}, nil); !errors.Is(err, sdk.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "read-only import") {
		t.Fatalf("Load into the import = %v, want ErrInvalidArgument naming the read-only import", err)
	}
	re, err := b.Export(ctx, alias)
	if err != nil {
		t.Fatalf("Export of the import: %v", err)
	}
	re.File.Close()
	if got, err := b.Read(ctx, alias, 100, uint64(len(data))); err != nil || string(got) != string(data) {
		t.Fatalf("Read after the refused Load into the import: %v", err)
	}
	// What the driver was asked: a read-write grant for the allocation,
	// a read-only one for each import (this backend's and the cuda-ipc
	// backend's), no other.
	grants, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	want := "cuMemSetAccess flags=3 bytes=4194304 created\n" + strings.Repeat("cuMemSetAccess flags=1 bytes=4194304 imported\n", 2)
	if string(grants) != want {
		t.Fatalf("cuMemSetAccess grants:\n%s\nwant:\n%s", grants, want)
	}
	if err := b.Free(ctx, alias); err != nil {
		t.Fatal(err)
	}
	h.File.Close()
	if free := backendtest.FreeMemory(t, b, 0); free != fakeMemory {
		t.Fatalf("device free memory %d after freeing everything, want %d", free, fakeMemory)
	}
}

// TestVMMNeedsPosixFDExport: a device that cannot export POSIX descriptors
// is refused at open for cuda-vmm-fd, naming the device and the default to
// fall back on; cuda-ipc still opens on it.
func TestVMMNeedsPosixFDExport(t *testing.T) {
	cfg := fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKECUDA_NO_POSIX_FD": "1"}})
	cfg.Handle = HandleVMMFD
	_, err := OpenRuntime(cfg, nil)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "POSIX file descriptors") || !strings.Contains(err.Error(), "GPU-") {
		t.Fatalf("OpenRuntime(cuda-vmm-fd) on a device without POSIX fd export = %v, want ErrUnavailable naming the device", err)
	}
	cfg.Handle = HandleIPC
	rt, err := OpenRuntime(cfg, nil)
	if err != nil {
		t.Fatalf("OpenRuntime(cuda-ipc): %v", err)
	}
	rt.Close()
}
