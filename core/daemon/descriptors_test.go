package daemon

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/wcache/wcache/core/cacheconfig"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// TestLeaseEventCarriesTheTokenOnlyWithDescriptors: a manifest of memfd
// handles sends each lease its own fd_token next to its lease id; a
// manifest of name handles sends none, whatever the lease's token.
func TestLeaseEventCarriesTheTokenOnlyWithDescriptors(t *testing.T) {
	cfg := cacheconfig.Default()
	f, err := sdk.NewMemfd("wcache-test", 5*8192)
	if err != nil {
		t.Fatal(err)
	}
	withFD := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 7, planOf(5),
		[]sdk.Handle{{Kind: names.KindMemfd, Size: 5 * 8192, File: f}})
	defer withFD.files.close()
	names := newManifest("GPU-1", "mock", cfg.ToProto(), cfg.Digest(), 7, planOf(5),
		[]sdk.Handle{{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 5 * 8192}})
	token := bytes.Repeat([]byte{0xa5}, 32)
	for _, tc := range []struct {
		m     *manifest
		table bool
		want  []byte
	}{{withFD, false, token}, {withFD, true, token}, {names, false, nil}} {
		ev, err := tc.m.leaseEvent(42, token, tc.table)
		if err != nil {
			t.Fatal(err)
		}
		var got daemonv1.AttachEvent
		if err := proto.Unmarshal(flatten(ev), &got); err != nil {
			t.Fatal(err)
		}
		if m := got.GetManifest(); m.GetLeaseId() != 42 || !bytes.Equal(m.GetFdToken(), tc.want) {
			t.Errorf("table %v, handle %s: lease %d, fd_token %x; want 42, %x", tc.table, tc.m.handles[0].GetKind(),
				m.GetLeaseId(), m.GetFdToken(), tc.want)
		}
	}
	// The daemon's own descriptor stays; a lease gets a read-only duplicate.
	ds, err := withFD.files.descriptors(false)
	if err != nil || len(ds) != 1 || ds[0].Handle != 0 || ds[0].Size != 5*8192 || ds[0].File.Fd() == f.Fd() {
		t.Fatalf("descriptors: %+v, %v", ds, err)
	}
	ds[0].File.Close()
}
