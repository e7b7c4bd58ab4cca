package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testplugin"
	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/mock"
)

// checkServesCheckpoint attaches to r and compares every tensor's bytes
// with the fixture's checkpoint.
func checkServesCheckpoint(t *testing.T, f *fixture, r *running) {
	t.Helper()
	m := r.mustAttach(t).Manifest
	if len(m.Tensors) != len(f.model.Tensors) {
		t.Fatalf("%d tensors, checkpoint %d", len(m.Tensors), len(f.model.Tensors))
	}
	arenas := map[int][]byte{}
	for _, tn := range m.Tensors {
		if arenas[tn.Handle] == nil {
			b, err := os.ReadFile(string(m.Handles[tn.Handle].Data))
			if err != nil {
				t.Fatal(err)
			}
			arenas[tn.Handle] = b
		}
		want, ok := f.model.Tensor(0, tn.Name)
		if !ok || !bytes.Equal(arenas[tn.Handle][tn.Offset:tn.Offset+tn.Length], want.Data()) {
			t.Fatalf("tensor %s: device bytes differ from the checkpoint's", tn.Name)
		}
	}
}

// fillStatus is r's Status.
func fillStatus(t *testing.T, r *running) *client.Status {
	t.Helper()
	st, err := r.dial(t).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSiblingFillCopiesFromAServingSibling(t *testing.T) {
	f := newFixture(t)
	first := f.start(0, nil)
	second := f.start(1, nil)

	st := fillStatus(t, second)
	ph := st.StartPhases
	if st.FilledFrom != "peer "+f.uuids[0] || st.FillFallback != "" || ph.BytesFromPeer != f.model.TotalBytes ||
		ph.BytesLoaded != 0 || ph.Source != SourceFiles || st.Generations[0].FilledFrom != st.FilledFrom {
		t.Fatalf("filled from %q (fallback %q), phases %+v", st.FilledFrom, st.FillFallback, ph)
	}
	checkServesCheckpoint(t, f, second)
	// The content records are the sibling's (the same files).
	want := first.d.Info().Content
	got := second.d.Info().Content
	if len(got) != len(want) || len(got) != 2 {
		t.Fatalf("content %+v, sibling's %+v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("content %d: %+v, sibling's %+v", i, got[i], want[i])
		}
	}
	// The sibling served on and holds no lease of the fill any more.
	if st := fillStatus(t, first); st.State != "serving" || len(st.Leases) != 0 || st.FilledFrom != FilledFromFiles {
		t.Errorf("sibling: state %s, leases %+v, filled from %q", st.State, st.Leases, st.FilledFrom)
	}
}

// cachedDigests is a digest cache in a new folder holding the digest of
// every file of paths.
func cachedDigests(t testing.TB, paths ...string) *client.DigestCache {
	t.Helper()
	cache := &client.DigestCache{Dir: filepath.Join(t.TempDir(), "digests"), UID: os.Geteuid()}
	for _, p := range paths {
		digest, err := filedigest.File(context.Background(), p, filedigest.Options{})
		fi, serr := os.Stat(p)
		if err = errors.Join(err, serr); err == nil {
			err = cache.Store(safetensors.StampOf(fi), digest)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return cache
}

// TestSiblingFillFromACopyProvenByTheDigestCache: a sibling that loaded
// another copy of the checkpoint fills this daemon when the user's digest
// cache holds the local files' digests, equal to the sibling's; the
// content records then name the local files.
func TestSiblingFillFromACopyProvenByTheDigestCache(t *testing.T) {
	f := newFixture(t)
	cp := filepath.Join(f.dir, "copy")
	if err := os.Mkdir(cp, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(f.model.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(f.model.Dir, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(cp, e.Name()), data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f.start(0, func(o *Options) { o.Model = cp })
	r := f.start(1, func(o *Options) { o.DigestCache = cachedDigests(t, f.model.Files...) })
	if st := fillStatus(t, r); st.FilledFrom != "peer "+f.uuids[0] || st.FillFallback != "" {
		t.Fatalf("filled from %q (fallback %q)", st.FilledFrom, st.FillFallback)
	}
	checkServesCheckpoint(t, f, r)
	for _, c := range r.d.Info().Content {
		fi, err := os.Stat(c.Path)
		if err != nil || filepath.Dir(c.Path) != f.model.Dir || c.Identity != safetensors.StampOf(fi) {
			t.Errorf("content record %+v does not name the local file (%v)", c, err)
		}
	}
}

// scribbledSibling starts a sibling of the fixture's checkpoint (posix-shm
// arenas, files in f.shm) and then writes other bytes into the middle of
// each of its arenas, as a process of the same uid can.
func scribbledSibling(f *fixture) {
	f.t.Helper()
	f.memfd = false
	f.start(0, nil)
	arenas, err := filepath.Glob(filepath.Join(f.shm, "*"))
	if err != nil || len(arenas) == 0 {
		f.t.Fatalf("the sibling's arena files in %s: %v (%d)", f.shm, err, len(arenas))
	}
	for _, a := range arenas {
		testworld.Scribble(f.t, a)
	}
}

func TestSiblingFillFallsBack(t *testing.T) {
	// otherContent starts a sibling of the same headers (so the same
	// weights identity) and other bytes.
	otherContent := func(f *fixture) {
		other := f.generate("finetune", safetensorstest.GenOptions{Shards: 2, Seed: 9})
		f.start(0, func(o *Options) { o.Model = other.Dir })
	}
	cases := []struct {
		name string
		// sibling starts the sibling (nil: none); edit the filled daemon's
		// options; inject its backend.
		sibling func(f *fixture)
		edit    func(f *fixture, o *Options)
		inject  func(f *fixture, mem *mock.Memory, b *mock.Backend)
		// reason is in fill_fallback ("" none: not tried).
		reason string
		// memfd: both daemons' backends export memfd arenas (the copy
		// is then checked from the descriptors, in BLAKE3).
		memfd bool
	}{
		{name: "no sibling"},
		{name: "peer fill off", sibling: func(f *fixture) { f.start(0, nil) },
			edit: func(_ *fixture, o *Options) { o.PeerFill = PeerFillOff }},
		{name: "sibling of other content", reason: "not these files", sibling: otherContent},
		// The sibling's memory written after it loaded the very files this
		// daemon opens (posix-shm arenas, same uid; CUDA IPC memory any
		// admitted client maps writable): its records are still true of
		// the files, its bytes are not. The copy is proven against the
		// local files, hashed alongside the copy or known to the digest
		// cache, and refused.
		{name: "sibling's memory written since it loaded", reason: "(hashed the local file): the source's memory is not these files",
			sibling: scribbledSibling},
		{name: "sibling's memory written since it loaded, the local files' digests cached",
			reason: "(digest cache): the source's memory is not these files", sibling: scribbledSibling,
			edit: func(f *fixture, o *Options) { o.DigestCache = cachedDigests(f.t, f.model.Files...) }},
		{name: "sibling's memory written since it loaded, serve --verify",
			reason: "the source's memory is not these files", sibling: scribbledSibling,
			edit: func(_ *fixture, o *Options) { o.VerifyLoad = true }},
		{name: "sibling of other content, the local files' digests cached", reason: "content differs", sibling: otherContent,
			edit: func(f *fixture, o *Options) { o.DigestCache = cachedDigests(f.t, f.model.Files...) }},
		{name: "no peer copy in the backend", reason: "unsupported",
			sibling: func(f *fixture) { f.start(0, nil) },
			inject:  func(_ *fixture, _ *mock.Memory, b *mock.Backend) { b.PeerCopyFunc = nil }},
		{name: "copy corrupted", reason: "digest mismatch",
			sibling: func(f *fixture) { f.start(0, nil) },
			inject: func(f *fixture, mem *mock.Memory, b *mock.Backend) {
				b.PeerCopyFunc = corruptingPeerCopy(mem, func(req sdk.PeerCopyRequest) int64 { return int64(req.Length / 2) })
			}},
		{name: "copy corrupted, memfd arenas", reason: "digest mismatch", memfd: true,
			sibling: func(f *fixture) { f.start(0, nil) },
			inject: func(f *fixture, mem *mock.Memory, b *mock.Backend) {
				// Inside a tensor: the copy is proven against the files, so
				// a byte of an arena's alignment padding is no corruption.
				b.PeerCopyFunc = corruptingPeerCopy(mem, func(req sdk.PeerCopyRequest) int64 { return int64(req.Length / 2) })
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.memfd = tc.memfd
			if tc.sibling != nil {
				tc.sibling(f)
			}
			mem, err := mock.NewMemory(mock.MemoryOptions{DeviceUUIDs: f.uuids, Memory: 1 << 30, Dir: f.shm, Memfd: tc.memfd})
			if err != nil {
				t.Fatal(err)
			}
			b := mock.Wrap(mem)
			if tc.inject != nil {
				tc.inject(f, mem, b)
			}
			o := f.options(1)
			if tc.edit != nil {
				tc.edit(f, &o)
			}
			r := f.run(testplugin.New(b, mem), o)
			st := fillStatus(t, r)
			if st.FilledFrom != FilledFromFiles || st.StartPhases.BytesLoaded != f.model.TotalBytes || st.StartPhases.BytesFromPeer != 0 {
				t.Fatalf("filled from %q, phases %+v", st.FilledFrom, st.StartPhases)
			}
			if tc.reason == "" && st.FillFallback != "" || !strings.Contains(st.FillFallback, tc.reason) {
				t.Fatalf("fill_fallback %q, want %q", st.FillFallback, tc.reason)
			}
			t.Logf("fill_fallback: %s", st.FillFallback)
			if tc.reason != "" && !strings.Contains(st.FillFallback, "peer "+f.uuids[0]) {
				t.Errorf("fill_fallback %q does not name the sibling", st.FillFallback)
			}
			if !tc.memfd { // checkServesCheckpoint reads posix-shm handles by path
				checkServesCheckpoint(t, f, r)
			}
			// Nothing of a failed fill is left on the device: what it
			// has in use is the generation's arena.
			devs, err := mem.Devices(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if used := devs[1].TotalMemory - devs[1].FreeMemory; used != r.d.Info().Load.AllocatedBytes {
				t.Errorf("device 1 has %d bytes in use, the generation %d", used, r.d.Info().Load.AllocatedBytes)
			}
		})
	}
}
