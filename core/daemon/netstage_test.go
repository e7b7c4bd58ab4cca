package daemon

import (
	"strings"
	"testing"

	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/core/daemon/fill/filltest"
	"github.com/wcache/wcache/core/peer"
)

// TestFilledFromPeerIntoDeviceArenas: B's backend exports no memfd (what a
// GPU's device memory is to the daemon), so B stages the received bytes in
// memfds, window by window, and its backend Loads each from
// /proc/<pid>/fd/<n>: B is filled from A (A's arenas memfd or read
// through its backend), with A's content digests, an attach reads exactly
// the checkpoint's bytes, and no staging memfd is left open.
func TestFilledFromPeerIntoDeviceArenas(t *testing.T) {
	forEachPeerA(t, func(t *testing.T, f *fixture, a *running, creds *peer.Credentials) {
		f.memfd = false
		var s filltest.StagedLoads
		b := f.startWith(1, f.plugin(s.Inject), func(o *Options) {
			otherNode(t, o)
			o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds, StageWindowBytes: filltest.StageWindow}
		})
		info := checkFilledFromPeer(t, a, b)
		checkPeerContent(t, a, info)
		// Every arena byte came through a staged Load of at most one
		// window, and there was more than one window.
		var staged uint64
		for _, e := range s.Loads {
			if e.Length == 0 || e.Length > filltest.StageWindow || e.FileOffset != 0 {
				t.Errorf("staged load %+v: want one window from offset 0", e)
			}
			staged += e.Length
		}
		if len(s.Loads) < 2 || staged < info.Load.Bytes || staged > info.Load.AllocatedBytes {
			t.Errorf("%d staged loads of %d bytes in all; B's load %+v", len(s.Loads), staged, info.Load)
		}
		if n := filltest.OpenStagingMemfds(t, fill.StageMemfdName); n != 0 {
			t.Errorf("%d staging memfds still open after the fill", n)
		}
		verifyAgainst(t, b.mustAttachHashing(t), f.model.Dir)
	})
}

// TestStagedLoadFailureReadsTheFiles: a staged Load that fails (after
// others succeeded) makes B free the arenas and the staging memory and
// read the files, saying why; an attach reads the checkpoint's bytes.
func TestStagedLoadFailureReadsTheFiles(t *testing.T) {
	f := newFixture(t)
	a, creds := peerPair(t, f, true)
	f.memfd = false
	s := filltest.StagedLoads{FailAt: 2}
	b := f.startWith(1, f.plugin(s.Inject), func(o *Options) {
		otherNode(t, o)
		o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds, StageWindowBytes: filltest.StageWindow}
	})
	l := b.d.Info().Load
	if l.FilledFrom != FilledFromFiles || !strings.Contains(l.FillFallback, "staging memfd") || !strings.Contains(l.FillFallback, "injected") {
		t.Fatalf("B's load: filled from %q, fallback %q: want files after the staged load failed", l.FilledFrom, l.FillFallback)
	}
	if len(s.Loads) < 2 {
		t.Fatalf("%d staged loads: the failure was not the one injected", len(s.Loads))
	}
	if live := s.Live.Load(); live != int64(l.Allocations) {
		t.Errorf("B's backend holds %d allocations, its generation %d: the fill's arenas were not freed", live, l.Allocations)
	}
	if n := filltest.OpenStagingMemfds(t, fill.StageMemfdName); n != 0 {
		t.Errorf("%d staging memfds still open after the failed fill", n)
	}
	verifyAgainst(t, b.mustAttachHashing(t), f.model.Dir)
}
