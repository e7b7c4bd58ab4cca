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
