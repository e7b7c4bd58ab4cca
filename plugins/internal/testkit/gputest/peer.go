package gputest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// peerSource starts an exporting plugin, loads a file of n bytes into an
// allocation of size bytes on its device 0 and exports it.
func peerSource(t *testing.T, p Plugin, n int, size uint64, env ...string) (sdk.Handle, [32]byte) {
	t.Helper()
	exporter := p.StartOnFakes(t, "", env...)
	path, data := WriteFile(t, n, 26)
	id := LoadFile(t, exporter, path, n, size, 0)
	h, err := exporter.Export(context.Background(), id)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if h.File != nil {
		t.Cleanup(func() { h.File.Close() })
	}
	return h, sha256.Sum256(data)
}

// CheckPeerCopyAcrossDevices copies an allocation of device 0, exported by
// one plugin process, into device 1 of another, through the pair's P2P
// path and, with the pair listed in the fake's NO_P2P, through host
// staging: the stats name the path that ran ("p2p", "staged": the fake
// refuses a peer copy across a pair without P2P, so "staged" is only
// reported when the backend's own staging moved the bytes), the copy holds
// the source's bytes, and device 1 is the copy's.
func CheckPeerCopyAcrossDevices(t *testing.T, p Plugin) {
	for _, tc := range []struct {
		name, noP2P, path string
	}{
		{"P2P", "", "p2p"},
		{"NoP2PStagedThroughHost", "0-1", "staged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{p.FakePrefix + "NO_P2P=" + tc.noP2P}
			// Not a multiple of the staging buffers: the last chunk is short.
			const n = 3<<20 + 4099
			h, want := peerSource(t, p, n, n, env...)
			copier := p.StartOnFakes(t, "", env...)
			ctx := context.Background()
			res, err := sdk.PeerCopy(ctx, copier, sdk.PeerCopyRequest{Ordinal: 1, Source: h}, nil)
			if err != nil {
				t.Fatalf("PeerCopy to device 1: %v", err)
			}
			if res.Stats.Path != tc.path || res.Stats.Bytes != n {
				t.Errorf("PeerCopy stats %+v, want %d bytes by path %q", res.Stats, n, tc.path)
			}
			sums, err := copier.Digest(ctx, res.ID, []sdk.Range{{Length: n}})
			if err != nil || sums[0] != want {
				t.Fatalf("the copy's digest differs from the source's (%v)", err)
			}
			if err := copier.Free(ctx, res.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// CheckPeerCopyWithoutEntryPoints: a plugin whose vendor library lacks
// the peer-copy entry points still starts and serves, and answers a peer
// copy with ErrUnsupported (the daemon's cue to read the files).
func CheckPeerCopyWithoutEntryPoints(t *testing.T, p Plugin) {
	t.Helper()
	h, _ := peerSource(t, p, 4096, 4096)
	copier := p.StartOnFakes(t, "nopeer")
	ctx := context.Background()
	_, err := sdk.PeerCopy(ctx, copier, sdk.PeerCopyRequest{Ordinal: 1, Source: h}, nil)
	if !errors.Is(err, sdk.ErrUnsupported) {
		t.Fatalf("PeerCopy without the entry points = %v, want ErrUnsupported", err)
	}
	if _, err := copier.Import(ctx, 0, h); err != nil {
		t.Fatalf("Import on the same plugin: %v", err)
	}
}

// CheckPeerCopyFailureLeavesNothing makes the fake's third peer copy of
// the copier process fail (PEER_ERROR=1@3: invalid value, naming
// p.InvalidValue, the vendor's error) in a copy of several chunks on several
// streams, and checks that PeerCopy fails with it and leaves nothing on
// device 1: the whole device can be allocated afterwards.
func CheckPeerCopyFailureLeavesNothing(t *testing.T, p Plugin) {
	t.Helper()
	// Three chunks (PeerSize): the first copies complete before the third
	// fails.
	h, _ := peerSource(t, p, 1<<20, PeerSize)
	copier := p.StartOnFakes(t, "", p.FakePrefix+"PEER_ERROR=1@3")
	ctx := context.Background()
	_, err := sdk.PeerCopy(ctx, copier, sdk.PeerCopyRequest{Ordinal: 1, Source: h}, nil)
	if err == nil || !strings.Contains(err.Error(), p.InvalidValue) {
		t.Fatalf("PeerCopy with its third copy failing = %v, want an error naming %s", err, p.InvalidValue)
	}
	id, _, err := copier.Allocate(ctx, 1, p.FakeCapacity)
	if err != nil {
		t.Fatalf("allocating all of device 1 after the failed copy: %v (the half-filled copy was left)", err)
	}
	if err := copier.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// PeerSize is the source of the multi-chunk peer copies: three of
// sdk/fill's 64 MiB device-copy chunks but for a page, so they run on
// three streams and the last is short.
const PeerSize = 3*64<<20 - 4096

// BenchPeerCopy measures peer copies of PeerSize bytes from device 0 of
// one plugin process to device 1 of another through the fake copy engine
// paced at PacedGBPS GB/s (both started on the fakes with that pacing and, where
// the fake has it, PREFAULT=1), and reports paced_fraction: the copy's
// rate (its Stats.Wall) over the engine's (1 when the copy streams keep
// the engine busy). A figure, never an assertion.
func BenchPeerCopy(b *testing.B, p Plugin) {
	const size, gbps = PeerSize, PacedGBPS
	env := []string{fmt.Sprintf("%sCOPY_GBPS=%v", p.FakePrefix, gbps), p.FakePrefix + "PREFAULT=1"}
	exporter := p.StartOnFakes(b, "", env...)
	ctx := context.Background()
	id, _, err := exporter.Allocate(ctx, 0, size)
	if err != nil {
		b.Fatal(err)
	}
	h, err := exporter.Export(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	if h.File != nil {
		defer h.File.Close()
	}
	copier := p.StartOnFakes(b, "", env...)
	var bytes, secs float64
	b.SetBytes(size)
	for b.Loop() {
		res, err := sdk.PeerCopy(ctx, copier, sdk.PeerCopyRequest{Ordinal: 1, Source: h}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if res.Stats.Path != "p2p" {
			b.Fatalf("path %q, want p2p", res.Stats.Path)
		}
		bytes += float64(res.Stats.Bytes)
		secs += res.Stats.Wall.Seconds()
		if err := copier.Free(ctx, res.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(bytes/secs/(gbps*1e9), "paced_fraction")
}
