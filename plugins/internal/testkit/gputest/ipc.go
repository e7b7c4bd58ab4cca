package gputest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// LoadFile allocates size bytes on device 0 of b and loads the first n
// bytes of the file at path at dest.
func LoadFile(t testing.TB, b sdk.Backend, path string, n int, size, dest uint64) sdk.AllocationID {
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

// CheckImportRejectsBadHandles checks the Import of handles that no
// vendor IPC handle of kind (64 bytes of data) can be: another kind
// (other) is ErrUnsupported; 63 or 65 bytes, size 0, garbage or an
// all-zero handle are ErrInvalidArgument; device badOrdinal, which b does
// not have, is ErrNoSuchDevice.
func CheckImportRejectsBadHandles(t *testing.T, b sdk.Backend, kind string, other sdk.Handle, badOrdinal int) {
	t.Helper()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		h    sdk.Handle
		kind error
	}{
		"other kind":  {other, sdk.ErrUnsupported},
		"short data":  {sdk.Handle{Kind: kind, Data: make([]byte, 63), Size: 10}, sdk.ErrInvalidArgument},
		"long data":   {sdk.Handle{Kind: kind, Data: make([]byte, 65), Size: 10}, sdk.ErrInvalidArgument},
		"zero size":   {sdk.Handle{Kind: kind, Data: make([]byte, 64)}, sdk.ErrInvalidArgument},
		"garbage":     {sdk.Handle{Kind: kind, Data: bytes.Repeat([]byte{0x5a}, 64), Size: 4096}, sdk.ErrInvalidArgument},
		"zero handle": {sdk.Handle{Kind: kind, Data: make([]byte, 64), Size: 10}, sdk.ErrInvalidArgument},
	} {
		if _, err := b.Import(ctx, 0, tc.h); !errors.Is(err, tc.kind) {
			t.Errorf("%s: Import = %v, want %v", name, err, tc.kind)
		}
	}
	if _, err := b.Import(ctx, badOrdinal, sdk.Handle{Kind: kind, Data: make([]byte, 64), Size: 1}); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Errorf("Import on ordinal %d = %v, want ErrNoSuchDevice", badOrdinal, err)
	}
}

// CheckImportAcrossProcesses loads 2,000,003 bytes at an unaligned offset
// of a 3 MiB allocation of b, exports it and opens the export in another
// process (RunImporter with marker and env), which must see the bytes; a
// handle claiming one byte more than the allocation holds must be refused
// there as an invalid argument.
func CheckImportAcrossProcesses(t *testing.T, b sdk.Backend, marker string, env ...string) {
	t.Helper()
	path, data := WriteFile(t, 2_000_003, 2)
	const dest = 4097
	id := LoadFile(t, b, path, len(data), 3<<20, dest)
	h, err := b.Export(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if out := RunImporter(t, marker, h, dest, len(data), env...); out != hex.EncodeToString(sum[:]) {
		t.Fatalf("importing process: %s, want sha256 %x", out, sum)
	}
	big := h
	big.Size = h.Size + 1
	if out := RunImporter(t, marker, big, dest, len(data), env...); !strings.Contains(out, "invalid argument") || !strings.Contains(out, "mapped allocation holds") {
		t.Fatalf("importing an oversized handle: %q, want an invalid-argument error about the mapping's size", out)
	}
}

// CheckImportOwnExport loads 300,000 bytes at offset 100 of a 1 MiB
// allocation of exporter and exports it: a 64-byte handle of kind, the
// same on a second Export. importer (exporter itself, or another Backend
// of its Runtime) imports it under an id of its own, which keeps the
// memory readable after the exporter frees its id; once both are freed
// the handle is stale (ErrInvalidArgument) and, when capacity is not 0,
// device 0's FreeMemory is capacity again.
func CheckImportOwnExport(t *testing.T, exporter, importer sdk.Backend, kind string, capacity uint64) {
	t.Helper()
	ctx := context.Background()
	path, data := WriteFile(t, 300_000, 1)
	id := LoadFile(t, exporter, path, len(data), 1<<20, 100)
	h, err := exporter.Export(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != kind || len(h.Data) != 64 || h.Size != 1<<20 {
		t.Fatalf("Export = %s, %d bytes of data, size %d", h.Kind, len(h.Data), h.Size)
	}
	again, err := exporter.Export(ctx, id)
	if err != nil || !bytes.Equal(again.Data, h.Data) {
		t.Fatalf("second Export = %x, %v; want the cached handle", again.Data, err)
	}
	alias, err := importer.Import(ctx, 0, h)
	if err != nil {
		t.Fatalf("Import of this process's own handle: %v", err)
	}
	if importer == exporter && alias == id {
		t.Fatal("Import returned the exporter's id")
	}
	// The alias keeps the memory after the original id is freed.
	if err := exporter.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := importer.Read(ctx, alias, 100, uint64(len(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Read through the alias after freeing the original: %v (equal=%v)", err, bytes.Equal(got, data))
	}
	if err := importer.Free(ctx, alias); err != nil {
		t.Fatal(err)
	}
	// Both ids gone: the memory is freed and the handle is stale.
	if _, err := importer.Import(ctx, 0, h); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("Import of a freed allocation's handle = %v, want ErrInvalidArgument", err)
	}
	if capacity == 0 {
		return
	}
	devs, err := exporter.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].FreeMemory != capacity {
		t.Fatalf("device free memory %d after freeing everything, want %d", devs[0].FreeMemory, capacity)
	}
}
