package rocmbackend

import (
	"context"
	"encoding/hex"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
)

// loadFile allocates size bytes on device 0 and loads the file at dest.
func loadFile(t *testing.T, b *Backend, path string, n int, size, dest uint64) sdk.AllocationID {
	return gputest.LoadFile(t, b, path, n, size, dest)
}

func TestImportOwnExportSharesTheAllocation(t *testing.T) {
	rt, err := OpenRuntime(fakeConfig(t, fakeOptions{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	a, b := rt.NewBackend(), rt.NewBackend()
	ctx := context.Background()
	path, data := writeFile(t, 100_000, 1)
	id := loadFile(t, a, path, len(data), 1<<20, 0)
	h, err := a.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != HandleKind || len(h.Data) != 64 || h.Size != 1<<20 {
		t.Fatalf("Export = %+v", h)
	}
	again, err := a.Export(ctx, id)
	if err != nil || hex.EncodeToString(again.Data) != hex.EncodeToString(h.Data) {
		t.Fatalf("a second Export gave another handle (%v)", err)
	}
	imp, err := b.Import(ctx, 0, h)
	if err != nil {
		t.Fatalf("Import of this process's own export: %v", err)
	}
	if err := a.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := b.Read(ctx, imp, 0, uint64(len(data)))
	if err != nil || string(got) != string(data) {
		t.Fatalf("the importer's id must keep the allocation alive after the exporter freed its id: %v", err)
	}
	if err := b.Free(ctx, imp); err != nil {
		t.Fatal(err)
	}
}

func TestImportRejectsBadHandles(t *testing.T) {
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	gputest.CheckImportRejectsBadHandles(t, b, HandleKind, sdk.Handle{Kind: "cuda-ipc", Data: make([]byte, 64), Size: 1}, 9)
}

// TestImportAcrossProcesses opens an export in another process through
// hipIpcOpenMemHandle, twice (the fake, like HIP, refcounts the open and
// returns one mapping), and checks the bytes there.
func TestImportAcrossProcesses(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{})
	gputest.CheckImportAcrossProcesses(t, newBackend(t, cfg), helperEnv, EnvLibrary+"="+cfg.Library, EnvAMDSMILibrary+"="+cfg.AMDSMILibrary)
}
