package backendtest

import (
	"bytes"
	"slices"
	"testing"

	"github.com/wcache/wcache/sdk"
)

func (s *suite) testAllocate(t *testing.T) {
	b := s.newBackend(t)
	ctx := s.ctx(t)
	for _, n := range []uint64{1, 4095, 4096, 1<<20 + 3} {
		id, got, err := b.Allocate(ctx, s.opts.Ordinal, n)
		if err != nil {
			t.Fatalf("Allocate(%d): %v", n, err)
		}
		if got < n {
			t.Errorf("Allocate(%d) reserved %d bytes", n, got)
		}
		// The whole reservation is addressable.
		if _, err := b.Digest(ctx, id, []sdk.Range{{Offset: 0, Length: got}}); err != nil {
			t.Errorf("Digest of the whole %d-byte allocation: %v", got, err)
		}
		if err := b.Free(ctx, id); err != nil {
			t.Fatalf("Free(%d): %v", id, err)
		}
	}
	// Ids are not reused within a process lifetime.
	a, _ := s.allocate(t, b, 4096)
	if err := b.Free(ctx, a); err != nil {
		t.Fatalf("Free: %v", err)
	}
	c, _ := s.allocate(t, b, 4096)
	if c == a {
		t.Errorf("allocation id %d was reused after Free", a)
	}
}

func (s *suite) testOutOfMemory(t *testing.T) {
	b := s.newBackend(t)
	ctx := s.ctx(t)
	size := s.opts.OOMSize
	if size == 0 {
		devs, err := b.Devices(ctx)
		if err != nil {
			t.Fatalf("Devices: %v", err)
		}
		if len(devs) <= s.opts.Ordinal {
			t.Fatalf("no device %d", s.opts.Ordinal)
		}
		size = devs[s.opts.Ordinal].TotalMemory + 1
	}
	id, _, err := b.Allocate(ctx, s.opts.Ordinal, size)
	if err == nil {
		_ = b.Free(ctx, id)
	}
	wantKind(t, "Allocate of more than the device holds", err, sdk.ErrOutOfMemory)
	s.assertUsable(t, b)
}

// load allocates l.size bytes and loads l's extents into it.
func (s *suite) load(t *testing.T, b sdk.Backend, l layout, progress sdk.ProgressFunc) sdk.AllocationID {
	t.Helper()
	id, _ := s.allocate(t, b, l.size)
	if err := b.Load(s.ctx(t), id, l.extents, progress); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return id
}

// verify reads every extent back through b and id, and digests it.
func (s *suite) verify(t *testing.T, b sdk.Backend, id sdk.AllocationID, l layout) {
	t.Helper()
	ctx := s.ctx(t)
	ranges := make([]sdk.Range, len(l.extents))
	for i, e := range l.extents {
		got, err := readAll(ctx, b, id, e.DestOffset, e.Length)
		if err != nil {
			t.Fatalf("Read extent %d: %v", i, err)
		}
		if want := l.want(i); !bytes.Equal(got, want) {
			t.Fatalf("extent %d (%s [%d, +%d) at %d): bytes read back differ from the file", i, e.Path, e.FileOffset, e.Length, e.DestOffset)
		}
		ranges[i] = sdk.Range{Offset: e.DestOffset, Length: e.Length}
	}
	sums, err := b.Digest(ctx, id, ranges)
	if err != nil {
		t.Fatalf("Digest: %v", err)
	}
	if len(sums) != len(ranges) {
		t.Fatalf("Digest returned %d sums for %d ranges", len(sums), len(ranges))
	}
	for i := range ranges {
		if want := sum(l.want(i)); sums[i] != want {
			t.Errorf("Digest of extent %d = %x, want sha256 of the file bytes %x", i, sums[i], want)
		}
	}
	// The first two extents are whole files.
	for i, f := range l.files {
		if sums[i] != sum(f.data) {
			t.Errorf("Digest of the whole of %s differs from sha256 of the file", f.path)
		}
	}
}

func (s *suite) testLoadRoundTrip(t *testing.T) {
	b := s.newBackend(t)
	l := newLayout(t)
	id := s.load(t, b, l, nil)
	s.verify(t, b, id, l)
}

func (s *suite) testLoadProgress(t *testing.T) {
	b := s.newBackend(t)
	l := newLayout(t)
	var seen [][2]uint64
	s.load(t, b, l, func(done, total uint64) { seen = append(seen, [2]uint64{done, total}) })
	for i, p := range seen {
		if p[1] != l.total() {
			t.Fatalf("progress call %d reports total %d, the extents hold %d bytes", i, p[1], l.total())
		}
		if p[0] > p[1] {
			t.Fatalf("progress call %d reports done %d > total %d", i, p[0], p[1])
		}
		if i > 0 && p[0] < seen[i-1][0] {
			t.Fatalf("progress went backwards: %v", seen)
		}
	}
}

func (s *suite) testExportImport(t *testing.T) {
	exporter := s.newBackend(t)
	ctx := s.ctx(t)
	info, err := exporter.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	l := newLayout(t)
	id := s.load(t, exporter, l, nil)
	h, err := exporter.Export(ctx, id)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if !slices.Contains(info.HandleKinds, h.Kind) {
		t.Errorf("Export made a %q handle; Info.HandleKinds lists %v", h.Kind, info.HandleKinds)
	}
	if h.Size < l.size {
		t.Errorf("handle covers %d bytes, the allocation holds %d", h.Size, l.size)
	}
	// Another instance (another process, for a plugin) maps the handle, as
	// `wcache attach --verify` does, and sees the same bytes.
	importer := s.newBackend(t)
	imported, err := importer.Import(ctx, s.opts.Ordinal, h)
	if err != nil {
		t.Fatalf("Import in a second instance: %v", err)
	}
	s.verify(t, importer, imported, l)
	if err := importer.Free(ctx, imported); err != nil {
		t.Fatalf("Free of the imported mapping: %v", err)
	}
	err = importer.Free(ctx, imported)
	wantKind(t, "second Free of the imported mapping", err, sdk.ErrNoSuchAllocation)
	// The exporter's allocation is untouched by the importer's Free.
	s.verify(t, exporter, id, l)
}

func (s *suite) testMappableByClient(t *testing.T) {
	if s.opts.MapHandle == nil {
		t.Skip("Options.MapHandle is not set: pass the Go client's mappers (client.Mappers.MapSDKHandle) to check that exported handles map")
	}
	b := s.newBackend(t)
	ctx := s.ctx(t)
	l := newLayout(t)
	id := s.load(t, b, l, nil)
	h, err := b.Export(ctx, id)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	data, release, err := s.opts.MapHandle(h)
	if err != nil {
		t.Fatalf("the client cannot map a %q handle: %v", h.Kind, err)
	}
	defer func() {
		if release != nil {
			if err := release(); err != nil {
				t.Errorf("release the mapping: %v", err)
			}
		}
	}()
	if uint64(len(data)) < l.size {
		t.Fatalf("the client mapped %d bytes of a %d-byte allocation", len(data), l.size)
	}
	for i, e := range l.extents {
		if !bytes.Equal(data[e.DestOffset:e.DestOffset+e.Length], l.want(i)) {
			t.Fatalf("extent %d: the client's mapping differs from the loaded bytes", i)
		}
	}
}
