package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testplugin"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/mock"
)

// dpPublication is publication() as data-parallel rank rank of 2, with
// content records of the fixture's checkpoint files: the first as it is,
// the second with an identity the file does not have (a file rewritten
// since the engine read it).
func dpPublication(t *testing.T, f *fixture, rank uint32) client.Publication {
	t.Helper()
	pub := publication()
	pub.Config.DPSize, pub.Config.DPRank = 2, rank
	for i, p := range f.model.Files {
		digest, err := filedigest.File(context.Background(), p, filedigest.Options{})
		fi, serr := os.Stat(p)
		if err = errors.Join(err, serr); err != nil {
			t.Fatal(err)
		}
		rec := cacheconfig.FileContent{Name: filepath.Base(p), Path: p, Digest: digest, Identity: safetensors.StampOf(fi)}
		if i == 1 {
			rec.Identity.MtimeNs++
		}
		pub.Files = append(pub.Files, rec)
	}
	return pub
}

// publishIn publishes pub into r (fillBytes).
func publishIn(t *testing.T, r *running, pub client.Publication) {
	t.Helper()
	if _, err := r.dial(t).Publish(context.Background(), pub, client.ShmFill(fillBytes, false)); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// attachTo attaches cfg to r.
func attachTo(t *testing.T, r *running, cfg cacheconfig.Config) (*client.Attachment, error) {
	t.Helper()
	a, err := client.Attach(context.Background(), client.BySocket(r.d.Info().Paths.Socket), cfg, client.Options{})
	if err == nil {
		t.Cleanup(func() { a.Lease.Close() })
	}
	return a, err
}

// checkPublishedBytes compares every tensor of m with what
// publication()'s fillBytes wrote (the storage of qkv once).
func checkPublishedBytes(t *testing.T, m *client.Manifest) {
	t.Helper()
	if len(m.Tensors) != 3 {
		t.Fatalf("%d tensors, want 3", len(m.Tensors))
	}
	for i, tn := range m.Tensors {
		h := m.Handles[tn.Handle]
		mem, err := client.MapShm(string(h.Data), h.Size)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, tn.Length)
		_ = fillBytes(min(i, 1), want)
		got := bytes.Clone(mem[tn.Offset : tn.Offset+tn.Length])
		client.Unmap(mem)
		if !bytes.Equal(got, want) {
			t.Errorf("tensor %s: bytes differ from the publication's", tn.Name)
		}
	}
}

// TestAttachFillsAPublicationFromASibling: daemon A serves an engine's
// publication of data-parallel rank 0; daemon B is empty. Attaches of rank
// 1 to B — two at once — get A's bytes, views and metadata under their own
// config, from one generation filled from A; the content records are
// carried as far as the files prove them.
func TestAttachFillsAPublicationFromASibling(t *testing.T) {
	f := newFixture(t)
	a := f.startEmpty(nil)
	publishIn(t, a, dpPublication(t, f, 0))
	b := f.start(1, func(o *Options) { o.Model = ""; allowHeaders(o) })

	cfg := publication().Config
	cfg.DPSize, cfg.DPRank = 2, 1
	var wg sync.WaitGroup
	atts := make([]*client.Attachment, 2)
	errs := make([]error, 2)
	for i := range atts {
		wg.Go(func() {
			atts[i], errs[i] = client.Attach(context.Background(), client.BySocket(b.d.Info().Paths.Socket), cfg, client.Options{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("attach %d: %v (B: %+v)", i, err, fillStatus(t, b))
		}
		defer atts[i].Lease.Close()
	}
	m := atts[0].Manifest
	if atts[1].Manifest.Generation != m.Generation || m.DeviceUUID != f.uuids[1] {
		t.Fatalf("generations %d and %d, device %s", m.Generation, atts[1].Manifest.Generation, m.DeviceUUID)
	}
	if m.Config.DPRank != 1 || m.Metadata["quant"] != "fp8" {
		t.Errorf("config dp_rank %d, metadata %v", m.Config.DPRank, m.Metadata)
	}
	q, k := m.Tensors[1], m.Tensors[2]
	if q.Offset != k.Offset || k.Layout == nil || k.Layout.StorageOffset != 8 || k.Layout.Strides[0] != 2 || q.Layout.Storage != "s" {
		t.Errorf("views of one storage: %+v %+v, %+v %+v", q, q.Layout, k, k.Layout)
	}
	checkPublishedBytes(t, m)

	st := fillStatus(t, b)
	if len(st.Generations) != 1 || st.FilledFrom != "peer "+f.uuids[0] || st.FillFallback != "" ||
		st.StartPhases.BytesFromPeer != 56 {
		t.Fatalf("B: %d generations, filled from %q (fallback %q), phases %+v", len(st.Generations), st.FilledFrom,
			st.FillFallback, st.StartPhases)
	}
	// Content: the first record as the engine gave it, the second (its
	// file is not the file it names) without path or identity.
	want := dpPublication(t, f, 1).Files
	if len(m.Files) != 2 || m.Files[0] != want[0] ||
		m.Files[1] != (cacheconfig.FileContent{Name: want[1].Name, Digest: want[1].Digest, Identity: safetensors.Stamp{Size: want[1].Identity.Size}}) {
		t.Errorf("content %+v, want %+v with the second reduced to its digest and size", m.Files, want)
	}
	// A served on; the fill's lease is gone.
	if st := fillStatus(t, a); st.State != "serving" || len(st.Leases) != 0 {
		t.Errorf("A: state %s, leases %+v", st.State, st.Leases)
	}
	// The same config again is a conflict: B holds it.
	if _, err := b.dial(t).Publish(context.Background(), dpPublication(t, f, 1), client.ShmFill(fillBytes, false)); !errors.Is(err, client.ErrHoldsWeights) {
		t.Errorf("publish of the filled config = %v, want ErrHoldsWeights", err)
	}
}

// TestAttachFillFallsBack: whatever keeps B from filling, the attach is
// answered as without peer fill (empty: the engine loads and publishes),
// B holds nothing, and a fill that was tried says why in Status and in
// the generation the engine then publishes.
func TestAttachFillFallsBack(t *testing.T) {
	cases := []struct {
		name string
		// sibling publishes in A (nil: no sibling); edit B's options;
		// inject B's backend; attach edits the attach's config.
		sibling bool
		edit    func(o *Options)
		inject  func(mem *mock.Memory, b *mock.Backend)
		attach  func(c *cacheconfig.Config)
		// both edits the configs of the sibling's publication and the attach.
		both func(c *cacheconfig.Config)
		// reason is in fill_fallback ("": nothing tried).
		reason string
	}{
		{name: "no sibling"},
		{name: "other weights identity", sibling: true, attach: func(c *cacheconfig.Config) { c.DType = "float16" }},
		{name: "experts sharded by the data-parallel rank", sibling: true, both: func(c *cacheconfig.Config) { c.EPSize = 2 }},
		{name: "peer fill off", sibling: true, edit: func(o *Options) { o.PeerFill = PeerFillOff }},
		{name: "copy error", sibling: true, reason: "injected copy error",
			inject: func(_ *mock.Memory, b *mock.Backend) {
				b.PeerCopyFunc = func(context.Context, sdk.PeerCopyRequest, sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
					return sdk.PeerCopyResult{}, errors.New("injected copy error")
				}
			}},
		{name: "no peer copy in the backend", sibling: true, reason: "unsupported",
			inject: func(_ *mock.Memory, b *mock.Backend) { b.PeerCopyFunc = nil }},
		{name: "copy corrupted", sibling: true, reason: "digest mismatch",
			inject: func(mem *mock.Memory, b *mock.Backend) {
				b.PeerCopyFunc = corruptingPeerCopy(mem, func(sdk.PeerCopyRequest) int64 { return 0 })
			}},
		{name: "memory cap", sibling: true, reason: "peer fill needs", edit: func(o *Options) { o.MaxBytes = 1 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.sibling {
				pub := dpPublication(t, f, 0)
				if tc.both != nil {
					tc.both(&pub.Config)
				}
				publishIn(t, f.startEmpty(nil), pub)
			}
			mem, err := mock.NewMemory(mock.MemoryOptions{DeviceUUIDs: f.uuids, Memory: 1 << 30, Dir: f.shm})
			if err != nil {
				t.Fatal(err)
			}
			mb := mock.Wrap(mem)
			if tc.inject != nil {
				tc.inject(mem, mb)
			}
			b := f.startWith(1, testplugin.New(mb, mem), func(o *Options) {
				o.Model = ""
				if tc.edit != nil {
					tc.edit(o)
				}
			})
			pub := dpPublication(t, f, 1)
			for _, edit := range []func(*cacheconfig.Config){tc.attach, tc.both} {
				if edit != nil {
					edit(&pub.Config)
				}
			}
			if _, err := attachTo(t, b, pub.Config); !errors.Is(err, client.ErrEmpty) {
				t.Fatalf("attach = %v, want ErrEmpty", err)
			}
			st := fillStatus(t, b)
			if len(st.Generations) != 0 || tc.reason == "" && st.FillFallback != "" || !strings.Contains(st.FillFallback, tc.reason) {
				t.Fatalf("B: %d generations, fill_fallback %q, want %q", len(st.Generations), st.FillFallback, tc.reason)
			}
			t.Logf("fill_fallback: %s", st.FillFallback)
			if tc.reason != "" && !strings.Contains(st.FillFallback, "peer "+f.uuids[0]) {
				t.Errorf("fill_fallback %q does not name the sibling", st.FillFallback)
			}
			// Nothing of a failed fill is left on B's device.
			devs, err := mem.Devices(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if used := devs[1].TotalMemory - devs[1].FreeMemory; used != 0 || b.d.HeldBytes() != 0 {
				t.Errorf("B's device has %d bytes in use, B holds %d", used, b.d.HeldBytes())
			}
			if tc.edit != nil && tc.reason != "" {
				return // a memory cap of 1 byte takes no publish either
			}
			// The engine publishes: the generation says why it was not filled.
			publishIn(t, b, pub)
			st = fillStatus(t, b)
			if st.FilledFrom != "" || st.FillFallback != st.Generations[0].FillFallback || !strings.Contains(st.FillFallback, tc.reason) ||
				tc.reason == "" && st.FillFallback != "" {
				t.Errorf("after the publish: filled from %q, fill_fallback %q", st.FilledFrom, st.FillFallback)
			}
		})
	}
}

// TestAttachFillYieldsToAPublishInProgress: while an engine publishes the
// config into B, an attach of it is answered as before (publishing) and
// nothing is filled; once that publish is gone, the same attach fills
// from A.
func TestAttachFillYieldsToAPublishInProgress(t *testing.T) {
	f := newFixture(t)
	publishIn(t, f.startEmpty(nil), dpPublication(t, f, 0))
	b := f.start(1, func(o *Options) { o.Model = ""; allowHeaders(o) })
	pub := dpPublication(t, f, 1)
	inFill := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.dial(t).Publish(ctx, pub, func(ctx context.Context, _ *client.PublishPlan) ([][]byte, error) {
			close(inFill)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		errc <- err
	}()
	<-inFill
	_, err := attachTo(t, b, pub.Config)
	var ee *client.EmptyError
	if !errors.As(err, &ee) || !ee.Publishing {
		t.Fatalf("attach during a publish = %v, want *EmptyError (publishing)", err)
	}
	if st := fillStatus(t, b); len(st.Generations) != 1 || st.Generations[0].State != "publishing" || st.FillFallback != "" {
		t.Fatalf("B during the publish: %+v, fill_fallback %q", st.Generations, st.FillFallback)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled publish = %v", err)
	}
	waitFor(t, "B to be empty again", func() bool { return b.d.State() == StateEmpty })
	a, err := attachTo(t, b, pub.Config)
	if err != nil {
		t.Fatalf("attach after the publish: %v", err)
	}
	checkPublishedBytes(t, a.Manifest)
}

// TestAttachFillBesideAnotherModel: B serves another model; an attach of
// A's weights (another DP rank) is filled as a generation beside it.
func TestAttachFillBesideAnotherModel(t *testing.T) {
	f := newFixture(t)
	publishIn(t, f.startEmpty(nil), dpPublication(t, f, 0))
	b := f.start(1, func(o *Options) { o.Model = ""; allowHeaders(o) })
	other := publication()
	other.Config.Model = "org/other"
	publishIn(t, b, other)
	pub := dpPublication(t, f, 1)
	a, err := attachTo(t, b, pub.Config)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	checkPublishedBytes(t, a.Manifest)
	st := fillStatus(t, b)
	if len(st.Generations) != 2 || st.Generations[1].FilledFrom != "peer "+f.uuids[0] || st.Generations[1].Config.DPRank != 1 ||
		st.Generations[0].FilledFrom != "" {
		t.Fatalf("B: %+v", st.Generations)
	}
}
