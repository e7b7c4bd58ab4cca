package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk/filedigest"
)

// peerPair starts daemon A on GPU 0 with a peer endpoint on loopback, its
// handles memfd or not (then the endpoint reads through the backend),
// and returns it with B's credentials.
func peerPair(t *testing.T, f *fixture, memfdA bool) (*running, *peer.Credentials) {
	t.Helper()
	ca := peertest.NewCA(t, "wcache test CA")
	f.memfd = memfdA
	a := f.start(0, func(o *Options) {
		o.Peer = PeerOptions{Listen: "127.0.0.1:0", Creds: ca.Issue(t, "node-a", ca)}
	})
	if a.d.PeerAddr() == "" {
		t.Fatal("A has no peer endpoint")
	}
	return a, ca.Issue(t, "node-b", ca)
}

// forEachPeerA runs test as a subtest twice, with A started by peerPair:
// its handles memfd, and its arenas read through its backend (no host
// mapping: what a device arena is).
func forEachPeerA(t *testing.T, test func(t *testing.T, f *fixture, a *running, creds *peer.Credentials)) {
	for _, memfdA := range []bool{true, false} {
		t.Run(map[bool]string{true: "A memfd", false: "A backend read"}[memfdA], func(t *testing.T) {
			f := newFixture(t)
			a, creds := peerPair(t, f, memfdA)
			test(t, f, a, creds)
		})
	}
}

// otherNode gives B a layout of its own: another node, as far as finding
// siblings goes (the same-node filler would fill B from A first).
func otherNode(t *testing.T, o *Options) {
	t.Helper()
	_, o.Layout = testworld.Folder(t)
}

// digestCacheOf makes a digest cache in a fresh folder that holds, for
// each of files under its current identity, digest(file); a failure ends
// the test.
func digestCacheOf(t *testing.T, files []string, digest func(path string) string) *client.DigestCache {
	t.Helper()
	cache := &client.DigestCache{Dir: t.TempDir(), UID: os.Geteuid()}
	for _, fl := range files {
		st, err := os.Stat(fl)
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.Store(safetensors.StampOf(st), digest(fl)); err != nil {
			t.Fatal(err)
		}
	}
	return cache
}

// checkFilledFromPeer fails t unless B's load came whole from A's peer
// endpoint, with no fallback; it returns B's info.
func checkFilledFromPeer(t *testing.T, a, b *running) Info {
	t.Helper()
	info := b.d.Info()
	if info.Load.FilledFrom != "peer "+a.d.PeerAddr() || info.Load.FillFallback != "" || info.Load.FromPeer != info.Load.Bytes {
		t.Fatalf("B's load %+v: want filled from %s", info.Load, a.d.PeerAddr())
	}
	return info
}

// checkPeerContent fails t unless B (its info) records A's digests with
// its own local files' identity: B knew nothing of its files (no digest
// cache, no hub blob), so it hashed them while the bytes arrived and
// proved the received bytes against them.
func checkPeerContent(t *testing.T, a *running, info Info) {
	t.Helper()
	want := map[string]string{}
	for _, c := range a.d.Info().Content {
		want[c.Name] = c.Digest
	}
	if len(info.Content) != len(want) {
		t.Fatalf("B records %d files, A %d", len(info.Content), len(want))
	}
	for _, c := range info.Content {
		fi, err := os.Stat(c.Path)
		if err != nil || c.Digest != want[c.Name] || c.Identity != safetensors.StampOf(fi) {
			t.Errorf("B's record of %s: %+v; want A's digest %s and the local file's identity (%v)", c.Name, c, want[c.Name], err)
		}
	}
}

// TestFilledFromPeerDaemon: B fills its checkpoint from A's endpoint, both
// with memfd handles and with A's arenas read through the backend (no host
// mapping: what a device arena is); with no digest cache B hashes its own
// files alongside and the content records carry the files' digests with
// the local files' identity, and an attach reads the checkpoint's bytes.
func TestFilledFromPeerDaemon(t *testing.T) {
	forEachPeerA(t, func(t *testing.T, f *fixture, a *running, creds *peer.Credentials) {
		f.memfd = true
		b := f.start(1, func(o *Options) {
			otherNode(t, o)
			o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds}
		})
		checkPeerContent(t, a, checkFilledFromPeer(t, a, b))
		att := b.mustAttachHashing(t)
		if att.Manifest.Generation == 0 {
			t.Fatal("no generation")
		}
	})
}

// TestPeerFillFallbacks: what B does when the fill cannot happen — the
// peer holds nothing (no fallback: nothing was tried), the same files
// planned otherwise, B's digest cache knows other content. (B's handles
// not memfd is a fill: netstage_test.go.)
func TestPeerFillFallbacks(t *testing.T) {
	t.Run("nothing held", func(t *testing.T) {
		f := newFixture(t)
		ca := peertest.NewCA(t, "wcache test CA")
		f.memfd = true
		a := f.start(0, func(o *Options) {
			o.Model = ""
			o.Peer = PeerOptions{Listen: "127.0.0.1:0", Creds: ca.Issue(t, "node-a", ca)}
		})
		b := f.start(1, func(o *Options) {
			otherNode(t, o)
			o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: ca.Issue(t, "node-b", ca)}
		})
		if l := b.d.Info().Load; l.FilledFrom != FilledFromFiles || l.FillFallback != "" {
			t.Fatalf("B's load: filled from %q, fallback %q: want files and no fallback (nothing was tried)", l.FilledFrom, l.FillFallback)
		}
	})
	t.Run("other layout", func(t *testing.T) {
		f := newFixture(t)
		a, creds := peerPair(t, f, true)
		b := f.start(1, func(o *Options) {
			o.Plan.FileAlignment = plan.HugePageAlignment // the same files, planned otherwise
			otherNode(t, o)
			o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds}
		})
		if l := b.d.Info().Load; l.FilledFrom != FilledFromFiles || !strings.Contains(l.FillFallback, "not the same layout") {
			t.Fatalf("B's load: filled from %q, fallback %q: want files, the offer's layout refused", l.FilledFrom, l.FillFallback)
		}
	})
	// A holds other bytes under the same weights identity (a fine-tune of
	// the same shapes: what A's memory written since it loaded looks like
	// from B) and B knows nothing of its files: B hashes them while the
	// bytes arrive, refuses the fill and reads the files.
	t.Run("other content, hashed here", func(t *testing.T) {
		f := newFixture(t)
		ca := peertest.NewCA(t, "wcache test CA")
		other := f.generate("finetune", safetensorstest.GenOptions{Shards: 2, Seed: 9})
		a := f.start(0, func(o *Options) {
			o.Model = other.Dir
			o.Peer = PeerOptions{Listen: "127.0.0.1:0", Creds: ca.Issue(t, "node-a", ca)}
		})
		b := f.start(1, func(o *Options) {
			otherNode(t, o)
			o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: ca.Issue(t, "node-b", ca)}
		})
		l := b.d.Info().Load
		if l.FilledFrom != FilledFromFiles || !strings.Contains(l.FillFallback, "content digest mismatch") ||
			!strings.Contains(l.FillFallback, "hashed the local file") {
			t.Fatalf("B's load: filled from %q, fallback %q: want files after the hashed files refused the bytes", l.FilledFrom, l.FillFallback)
		}
		verifyAgainst(t, b.mustAttach(t), f.model.Dir)
	})
	t.Run("other content known", func(t *testing.T) {
		f := newFixture(t)
		a, creds := peerPair(t, f, true)
		cache := digestCacheOf(t, f.model.Files, func(string) string { return filedigest.Bytes([]byte("other content")) })
		b := f.start(1, func(o *Options) {
			otherNode(t, o)
			o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds}
			o.DigestCache = cache
		})
		if l := b.d.Info().Load; l.FilledFrom != FilledFromFiles || !strings.Contains(l.FillFallback, "content digest mismatch") {
			t.Fatalf("B's load: filled from %q, fallback %q: want files after a content mismatch", l.FilledFrom, l.FillFallback)
		}
	})
}

// TestPeerSourceHolds: the endpoint's source answers ErrNotHeld for an
// identity it does not serve, the arenas' digests for one it does, and a
// read after the generation was evicted fails with ErrGenerationChanged.
func TestPeerSourceHolds(t *testing.T) {
	f := newFixture(t)
	f.memfd = true
	a := f.start(0, nil)
	src := a.d.peerSource()
	if _, err := src.Open(context.Background(), "sha256:00"); !errors.Is(err, peer.ErrNotHeld) {
		t.Fatalf("open of an identity not held: %v", err)
	}
	id, err := cacheconfig.WeightsIdentity(a.d.Info().Config, cacheconfig.WeightsFromFiles)
	if err != nil {
		t.Fatal(err)
	}
	g, err := src.Open(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	arenas := g.Arenas()
	if len(arenas) == 0 || !filedigest.Valid(arenas[0].Digest) {
		t.Fatalf("arenas %+v", arenas)
	}
	p := make([]byte, 4096)
	if err := g.ReadAt(context.Background(), 0, p, 0); err != nil {
		t.Fatal(err)
	}
	c := a.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := c.Evict(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.ReadAt(context.Background(), 0, p, 0); !errors.Is(err, peer.ErrGenerationChanged) {
		t.Fatalf("read after the evict: %v, want ErrGenerationChanged", err)
	}
}

// TestPeerFillProvenByHubBlobNames: B's files are hub blobs; with names
// that are their content's SHA-256 the received bytes are proven (the
// records carry the files' identity), with names that are not (what a
// peer of other content would be measured against) the fill is refused.
// Both with B's arenas memfd (read through their descriptors) and not
// (staged, the SHA-256 read back through the backend).
func TestPeerFillProvenByHubBlobNames(t *testing.T) {
	for _, c := range []struct {
		name           string
		honest, memfdB bool
	}{{"true names", true, true}, {"other names", false, true}, {"true names staged", true, false}, {"other names staged", false, false}} {
		honest := c.honest
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			a, creds := peerPair(t, f, true)
			repo := filepath.Join(t.TempDir(), "models--org--model")
			snap := safetensorstest.HubSnapshot(t, repo, "0123456789abcdef0123456789abcdef01234567", f.model.Dir,
				func(string) bool { return !honest })
			f.memfd = c.memfdB
			b := f.start(1, func(o *Options) {
				o.Model = snap
				otherNode(t, o)
				o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds}
			})
			l := b.d.Info().Load
			if !honest {
				if l.FilledFrom != FilledFromFiles || !strings.Contains(l.FillFallback, "hub blob name") {
					t.Fatalf("B's load: filled from %q, fallback %q: want files after a blob name mismatch", l.FilledFrom, l.FillFallback)
				}
				return
			}
			if l.FilledFrom != "peer "+a.d.PeerAddr() {
				t.Fatalf("B's load: filled from %q, fallback %q", l.FilledFrom, l.FillFallback)
			}
			for _, c := range b.d.Info().Content {
				if c.Identity.Ino == 0 {
					t.Errorf("%s: the blob name proved the bytes, yet no file identity: %+v", c.Name, c)
				}
			}
		})
	}
}

// TestPeerFillProvenByAnOlderClientsDigests: B's digest cache holds only
// SHA-256 tree digests (as a client before BLAKE3 cached them). B digests
// the received bytes again in SHA-256 to compare: the true files' digests
// prove the fill (B's records name its files, with the BLAKE3 digests A
// offered), other content's refuse it.
func TestPeerFillProvenByAnOlderClientsDigests(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes func(path string) []byte
	}{
		{"the files' digests", func(path string) []byte {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"other content's digests", func(string) []byte { return []byte("other content") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			a, creds := peerPair(t, f, true)
			cache := digestCacheOf(t, f.model.Files, func(fl string) string { return filedigest.SHA256Tree.Bytes(tc.bytes(fl)) })
			b := f.start(1, func(o *Options) {
				otherNode(t, o)
				o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds}
				o.DigestCache = cache
			})
			l := b.d.Info().Load
			if tc.name != "the files' digests" {
				if l.FilledFrom != FilledFromFiles || !strings.Contains(l.FillFallback, "content digest mismatch") {
					t.Fatalf("B's load: filled from %q, fallback %q: want files after a content mismatch", l.FilledFrom, l.FillFallback)
				}
				return
			}
			info := checkFilledFromPeer(t, a, b)
			want := map[string]string{}
			for _, c := range a.d.Info().Content {
				want[c.Name] = c.Digest
			}
			for _, c := range info.Content {
				st, err := os.Stat(c.Path)
				if err != nil || c.Digest != want[c.Name] || c.Identity != safetensors.StampOf(st) {
					t.Errorf("B's record %+v: want A's digest %s and the local file's identity (%v)", c, want[c.Name], err)
				}
				if alg, _ := filedigest.AlgorithmOf(c.Digest); alg != filedigest.BLAKE3Tree {
					t.Errorf("B's record of %s is %s, want a BLAKE3 tree digest", c.Name, c.Digest)
				}
			}
		})
	}
}
