package rocmbackend

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
)

// loadFile allocates size bytes on device 0 and loads the file at dest.
func loadFile(t *testing.T, b *Backend, path string, n int, size uint64, dest uint64) sdk.AllocationID {
	t.Helper()
	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(n), DestOffset: dest}}, nil); err != nil {
		t.Fatal(err)
	}
	return id
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
	ctx := context.Background()
	for name, tc := range map[string]struct {
		h    sdk.Handle
		kind error
	}{
		"other kind":  {sdk.Handle{Kind: "cuda-ipc", Data: make([]byte, 64), Size: 1}, sdk.ErrUnsupported},
		"short data":  {sdk.Handle{Kind: HandleKind, Data: make([]byte, 63), Size: 1}, sdk.ErrInvalidArgument},
		"zero size":   {sdk.Handle{Kind: HandleKind, Data: make([]byte, 64)}, sdk.ErrInvalidArgument},
		"garbage":     {sdk.Handle{Kind: HandleKind, Data: []byte(strings.Repeat("x", 64)), Size: 4096}, sdk.ErrInvalidArgument},
		"wrong count": {sdk.Handle{Kind: HandleKind, Data: make([]byte, 65), Size: 1}, sdk.ErrInvalidArgument},
	} {
		if _, err := b.Import(ctx, 0, tc.h); !errors.Is(err, tc.kind) {
			t.Errorf("%s: Import = %v, want %v", name, err, tc.kind)
		}
	}
	if _, err := b.Import(ctx, 9, sdk.Handle{Kind: HandleKind, Data: make([]byte, 64), Size: 1}); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Errorf("Import on ordinal 9 = %v, want ErrNoSuchDevice", err)
	}
}

// TestImportAcrossProcesses opens an export in another process through
// hipIpcOpenMemHandle, twice (the fake, like HIP, refcounts the open and
// returns one mapping), and checks the bytes there.
func TestImportAcrossProcesses(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{})
	b := newBackend(t, cfg)
	ctx := context.Background()
	path, data := writeFile(t, 2_000_003, 2)
	const dest = 4097
	id := loadFile(t, b, path, len(data), 3<<20, dest)
	h, err := b.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha(data)
	if out := gputest.RunImporter(t, helperEnv, h, dest, len(data), EnvLibrary+"="+cfg.Library, EnvAMDSMILibrary+"="+cfg.AMDSMILibrary); out != hex.EncodeToString(sum[:]) {
		t.Fatalf("importing process: %s, want sha256 %x", out, sum)
	}
	big := h
	big.Size = h.Size + 1
	if out := gputest.RunImporter(t, helperEnv, big, dest, len(data), EnvLibrary+"="+cfg.Library, EnvAMDSMILibrary+"="+cfg.AMDSMILibrary); !strings.Contains(out, "invalid argument") || !strings.Contains(out, "mapped allocation holds") {
		t.Fatalf("importing an oversized handle: %q, want an invalid-argument error about the mapping's size", out)
	}
}
