package backendtest

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// Every case here checks the error's kind with errors.Is and then that the
// backend still works: a bad argument must never crash or wedge it.

func (s *suite) testAllocateUnknownOrdinal(t *testing.T) {
	b := s.newBackend(t)
	n := len(s.uuids(t, b))
	_, _, err := b.Allocate(s.ctx(t), n, 4096)
	wantKind(t, "Allocate on an unknown ordinal", err, sdk.ErrNoSuchDevice)
	s.assertUsable(t, b)
}

func (s *suite) testAllocateZero(t *testing.T) {
	b := s.newBackend(t)
	_, _, err := b.Allocate(s.ctx(t), s.opts.Ordinal, 0)
	wantKind(t, "Allocate of 0 bytes", err, sdk.ErrInvalidArgument)
	s.assertUsable(t, b)
}

// freed returns the id of an allocation of b that was freed.
func (s *suite) freed(t *testing.T, b sdk.Backend) sdk.AllocationID {
	t.Helper()
	id, _ := s.allocate(t, b, 4096)
	if err := b.Free(s.ctx(t), id); err != nil {
		t.Fatalf("Free: %v", err)
	}
	return id
}

func (s *suite) testFreeTwice(t *testing.T) {
	b := s.newBackend(t)
	id := s.freed(t, b)
	wantKind(t, "second Free", b.Free(s.ctx(t), id), sdk.ErrNoSuchAllocation)
	s.assertUsable(t, b)
}

func (s *suite) testUnknownAllocation(t *testing.T) {
	b := s.newBackend(t)
	const bogus = sdk.AllocationID(0xdead_beef_0042)
	ctx := s.ctx(t)
	wantKind(t, "Free of an unknown id", b.Free(ctx, bogus), sdk.ErrNoSuchAllocation)
	_, err := b.Read(ctx, bogus, 0, 1)
	wantKind(t, "Read of an unknown id", err, sdk.ErrNoSuchAllocation)
	_, err = b.Digest(ctx, bogus, []sdk.Range{{Offset: 0, Length: 1}})
	wantKind(t, "Digest of an unknown id", err, sdk.ErrNoSuchAllocation)
	_, err = b.Export(ctx, bogus)
	wantKind(t, "Export of an unknown id", err, sdk.ErrNoSuchAllocation)
	s.assertUsable(t, b)
}

func (s *suite) testReadPastEnd(t *testing.T) {
	b := s.newBackend(t)
	id, size := s.allocate(t, b, 8192)
	ctx := s.ctx(t)
	for _, r := range []sdk.Range{{Offset: size, Length: 1}, {Offset: size - 1, Length: 2}, {Offset: 1 << 62, Length: 1}, {Offset: 1, Length: ^uint64(0)}} {
		_, err := b.Read(ctx, id, r.Offset, min(r.Length, sdk.MaxReadBytes))
		wantKind(t, "Read past the end", err, sdk.ErrInvalidArgument)
	}
	s.assertUsable(t, b)
}

func (s *suite) testReadTooLarge(t *testing.T) {
	b := s.newBackend(t)
	id, _ := s.allocate(t, b, 4096)
	_, err := b.Read(s.ctx(t), id, 0, sdk.MaxReadBytes+1)
	wantKind(t, "Read of more than MaxReadBytes", err, sdk.ErrInvalidArgument)
	s.assertUsable(t, b)
}

func (s *suite) testDigestPastEnd(t *testing.T) {
	b := s.newBackend(t)
	id, size := s.allocate(t, b, 4096)
	_, err := b.Digest(s.ctx(t), id, []sdk.Range{{Offset: 0, Length: 1}, {Offset: size - 10, Length: 11}})
	wantKind(t, "Digest of a range past the end", err, sdk.ErrInvalidArgument)
	_, err = b.Digest(s.ctx(t), id, []sdk.Range{{Offset: 1, Length: ^uint64(0)}})
	wantKind(t, "Digest of a range whose end overflows", err, sdk.ErrInvalidArgument)
	s.assertUsable(t, b)
}

func (s *suite) testExtentPastAllocationEnd(t *testing.T) {
	b := s.newBackend(t)
	f := writeFile(t, "w.safetensors", 10_000, 3)
	id, size := s.allocate(t, b, 4096)
	err := b.Load(s.ctx(t), id, []sdk.Extent{{Path: f.path, FileOffset: 0, Length: 100, DestOffset: size - 99}}, nil)
	wantKind(t, "Load of an extent past the allocation's end", err, sdk.ErrInvalidArgument)
	err = b.Load(s.ctx(t), id, []sdk.Extent{{Path: f.path, FileOffset: 0, Length: 100, DestOffset: ^uint64(0) - 10}}, nil)
	wantKind(t, "Load of an extent whose end overflows", err, sdk.ErrInvalidArgument)
	s.assertUsable(t, b)
}

func (s *suite) testExtentPastFileEnd(t *testing.T) {
	b := s.newBackend(t)
	f := writeFile(t, "w.safetensors", 10_000, 4)
	id, _ := s.allocate(t, b, 1<<20)
	err := b.Load(s.ctx(t), id, []sdk.Extent{{Path: f.path, FileOffset: 9_999, Length: 2, DestOffset: 0}}, nil)
	wantKind(t, "Load of an extent past the file's end", err, sdk.ErrInvalidArgument)
	s.assertUsable(t, b)
}

func (s *suite) testExtentFileMissing(t *testing.T) {
	b := s.newBackend(t)
	id, _ := s.allocate(t, b, 4096)
	missing := filepath.Join(t.TempDir(), "missing.safetensors")
	err := b.Load(s.ctx(t), id, []sdk.Extent{{Path: missing, Length: 1}}, nil)
	wantKind(t, "Load from a missing file", err, sdk.ErrInvalidArgument)
	s.assertUsable(t, b)
}

func (s *suite) testLoadIntoFreed(t *testing.T) {
	b := s.newBackend(t)
	f := writeFile(t, "w.safetensors", 10_000, 5)
	id := s.freed(t, b)
	err := b.Load(s.ctx(t), id, []sdk.Extent{{Path: f.path, Length: 100}}, nil)
	wantKind(t, "Load into a freed allocation", err, sdk.ErrNoSuchAllocation)
	s.assertUsable(t, b)
}

func (s *suite) testReadFreed(t *testing.T) {
	b := s.newBackend(t)
	id := s.freed(t, b)
	_, err := b.Read(s.ctx(t), id, 0, 1)
	wantKind(t, "Read of a freed allocation", err, sdk.ErrNoSuchAllocation)
	_, err = b.Export(s.ctx(t), id)
	wantKind(t, "Export of a freed allocation", err, sdk.ErrNoSuchAllocation)
	s.assertUsable(t, b)
}

func (s *suite) testImportGarbage(t *testing.T) {
	b := s.newBackend(t)
	info, err := b.Info(s.ctx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	for _, kind := range info.HandleKinds {
		for _, data := range [][]byte{nil, bytes.Repeat([]byte{0x5a}, 64), []byte("/etc/passwd"), []byte("../../../../etc/shadow")} {
			id, err := b.Import(s.ctx(t), s.opts.Ordinal, sdk.Handle{Kind: kind, Data: data, Size: 4096})
			if err == nil {
				_ = b.Free(s.ctx(t), id)
			}
			wantKind(t, "Import of a garbage "+kind+" handle", err, sdk.ErrInvalidArgument)
		}
	}
	s.assertUsable(t, b)
}

func (s *suite) testImportUnknownKind(t *testing.T) {
	b := s.newBackend(t)
	_, err := b.Import(s.ctx(t), s.opts.Ordinal, sdk.Handle{Kind: "x-backendtest-nosuchkind", Data: []byte{1, 2, 3}, Size: 4096})
	wantKind(t, "Import of an unknown handle kind", err, sdk.ErrUnsupported)
	s.assertUsable(t, b)
}

func (s *suite) testImportUnknownOrdinal(t *testing.T) {
	b := s.newBackend(t)
	n := len(s.uuids(t, b))
	info, err := b.Info(s.ctx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	_, err = b.Import(s.ctx(t), n, sdk.Handle{Kind: info.HandleKinds[0], Data: []byte{1}, Size: 4096})
	wantKind(t, "Import on an unknown ordinal", err, sdk.ErrNoSuchDevice)
	s.assertUsable(t, b)
}
