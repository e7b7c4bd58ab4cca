package cudabackend

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
)

// loadFile allocates size bytes on ordinal 0 and loads the file at dest.
func loadFile(t *testing.T, b *Backend, path string, n int, size, dest uint64) sdk.AllocationID {
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
	// Without NVML, FreeMemory is the driver's count (cuMemGetInfo).
	b := newBackend(t, fakeConfig(t, fakeOptions{noNVML: true}))
	ctx := context.Background()
	path, data := writeFile(t, 300_000, 1)
	id := loadFile(t, b, path, len(data), 1<<20, 100)
	h, err := b.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != HandleKind || len(h.Data) != 64 || h.Size != 1<<20 {
		t.Fatalf("Export = %s, %d bytes of data, size %d", h.Kind, len(h.Data), h.Size)
	}
	again, err := b.Export(ctx, id)
	if err != nil || !bytes.Equal(again.Data, h.Data) {
		t.Fatalf("second Export = %x, %v; want the cached handle", again.Data, err)
	}
	alias, err := b.Import(ctx, 0, h)
	if err != nil {
		t.Fatalf("Import of this process's own handle: %v", err)
	}
	if alias == id {
		t.Fatal("Import returned the exporter's id")
	}
	// The alias keeps the memory after the original id is freed.
	if err := b.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := b.Read(ctx, alias, 100, uint64(len(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Read through the alias after freeing the original: %v (equal=%v)", err, bytes.Equal(got, data))
	}
	if err := b.Free(ctx, alias); err != nil {
		t.Fatal(err)
	}
	// Both ids gone: the memory is freed and the handle is stale.
	if _, err := b.Import(ctx, 0, h); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("Import of a freed allocation's handle = %v, want ErrInvalidArgument", err)
	}
	if free := freeMemory(t, b); free != fakeMemory {
		t.Fatalf("device free memory %d after freeing everything, want %d", free, fakeMemory)
	}
}

// freeMemory returns ordinal 0's FreeMemory as the fake driver counts it.
func freeMemory(t *testing.T, b *Backend) uint64 {
	t.Helper()
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return devs[0].FreeMemory
}

func TestImportRejectsBadHandles(t *testing.T) {
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	ctx := context.Background()
	for name, tc := range map[string]struct {
		h    sdk.Handle
		kind error
	}{
		"other kind":  {sdk.Handle{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 10}, sdk.ErrUnsupported},
		"short":       {sdk.Handle{Kind: HandleKind, Data: make([]byte, 63), Size: 10}, sdk.ErrInvalidArgument},
		"zero size":   {sdk.Handle{Kind: HandleKind, Data: make([]byte, 64), Size: 0}, sdk.ErrInvalidArgument},
		"garbage":     {sdk.Handle{Kind: HandleKind, Data: bytes.Repeat([]byte{0x5a}, 64), Size: 10}, sdk.ErrInvalidArgument},
		"zero handle": {sdk.Handle{Kind: HandleKind, Data: make([]byte, 64), Size: 10}, sdk.ErrInvalidArgument},
	} {
		if _, err := b.Import(ctx, 0, tc.h); !errors.Is(err, tc.kind) {
			t.Errorf("%s: Import = %v, want %v", name, err, tc.kind)
		}
	}
	if _, err := b.Import(ctx, 3, sdk.Handle{Kind: HandleKind, Data: make([]byte, 64), Size: 1}); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Errorf("Import on ordinal 3 = %v, want ErrNoSuchDevice", err)
	}
}

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
	sum := sha256.Sum256(data)
	out := gputest.RunImporter(t, helperEnv, h, dest, len(data), EnvLibrary+"="+cfg.Library, EnvNVMLLibrary+"="+cfg.NVMLLibrary)
	if want := hex.EncodeToString(sum[:]); out != want {
		t.Fatalf("importing process: %s, want sha256 %s", out, want)
	}
	// A handle claiming more than the allocation holds is refused there.
	big := h
	big.Size = h.Size + 1
	if out := gputest.RunImporter(t, helperEnv, big, dest, len(data), EnvLibrary+"="+cfg.Library, EnvNVMLLibrary+"="+cfg.NVMLLibrary); !strings.Contains(out, "invalid argument") || !strings.Contains(out, "mapped allocation holds") {
		t.Fatalf("importing an oversized handle: %q, want an invalid-argument error about the mapping's size", out)
	}
}
