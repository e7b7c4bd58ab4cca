package daemon

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/wcache/wcache/core/cacheconfig"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
	"github.com/wcache/wcache/sdk"
)

// TestLeaseEventCarriesBlobNamesVerifiedLater: hub blob names verified
// after the manifest's bytes were built still reach every later lease, and
// decode to exactly forLease's message.
func TestLeaseEventCarriesBlobNamesVerifiedLater(t *testing.T) {
	cfg := cacheconfig.Default()
	m := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 7, planOf(3),
		[]sdk.Handle{{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 3 * 8192}})
	m.content = []*daemonv1.FileContent{{Name: "a.safetensors", Digest: "d"}, {Name: "b.safetensors", Digest: "e"}}
	for i, name := range []string{"", "a.safetensors", "b.safetensors"} {
		if name != "" {
			m.blobs.add(&daemonv1.FileSHA256{Name: name, Sha256: name + "-sum"})
		}
		for _, table := range []bool{false, true} {
			ev, err := m.leaseEvent(uint64(i+1), nil, table)
			if err != nil {
				t.Fatal(err)
			}
			var got daemonv1.AttachEvent
			if err := proto.Unmarshal(flatten(ev), &got); err != nil {
				t.Fatal(err)
			}
			if n := len(got.GetManifest().GetFileSha256()); n != i {
				t.Errorf("after %d verified, a lease gets %d", i, n)
			}
			if want := m.forLease(uint64(i + 1)); !table && !proto.Equal(&got, want) {
				t.Errorf("decoded\n%v\nwant\n%v", &got, want)
			}
		}
	}
}
