package rocmbackend

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
)

// TestLoadThroughSmallStaging loads extents much larger than the staging
// buffers while the fake delays every asynchronous copy, on device 1 (so
// a reader whose thread lacks hipSetDevice would queue onto device 0's
// stream, which the fake refuses): a buffer refilled before its copy
// completed, a wrong offset or a Load returning before the stream drained
// would all show as differing bytes.
func TestLoadThroughSmallStaging(t *testing.T) {
	for _, buffers := range []int{2, 3} {
		t.Run(fmt.Sprint("buffers=", buffers), func(t *testing.T) {
			cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKEHIP_COPY_DELAY_US": "200"}})
			cfg.Staging.Buffers = buffers
			b := newBackend(t, cfg)
			ctx := context.Background()
			pathA, a := writeFile(t, 700_001, 3)
			pathB, bb := writeFile(t, 123_457, 4)
			extents := []sdk.Extent{
				{Path: pathA, FileOffset: 5, Length: 300_000, DestOffset: 3},
				{Path: pathA, FileOffset: 300_005, Length: 400_000 - 4, DestOffset: 300_003},
				{Path: pathB, FileOffset: 0, Length: uint64(len(bb)), DestOffset: 800_000},
				{Path: pathB, FileOffset: 4095, Length: 8194, DestOffset: 1_000_000},
			}
			id, _, err := b.Allocate(ctx, 1, 1_200_000)
			if err != nil {
				t.Fatal(err)
			}
			var last [2]uint64
			if err := b.Load(ctx, id, extents, func(done, total uint64) { last = [2]uint64{done, total} }); err != nil {
				t.Fatal(err)
			}
			want := [][]byte{a[5:300_005], a[300_005:700_001], bb, bb[4095 : 4095+8194]}
			var total uint64
			for i, w := range want {
				e := extents[i]
				total += e.Length
				got, err := b.Read(ctx, id, e.DestOffset, e.Length)
				if err != nil || !bytes.Equal(got, w) {
					t.Fatalf("extent %d: bytes read back differ from the file (%v)", i, err)
				}
				sums, err := b.Digest(ctx, id, []sdk.Range{{Offset: e.DestOffset, Length: e.Length}})
				if err != nil || sums[0] != sha(w) {
					t.Fatalf("extent %d: Digest %x, %v", i, sums, err)
				}
			}
			if last != [2]uint64{total, total} {
				t.Fatalf("last progress %v, want (%d, %d)", last, total, total)
			}
		})
	}
}

func TestLoadRejectsBadExtentsBeforeCopying(t *testing.T) {
	gputest.CheckLoadRejectsBadExtents(t, newBackend(t, fakeConfig(t, fakeOptions{})))
}

// TestLoadKeepsThePacedCopyEngineBusy paces the fake HIP's copy engine
// (FAKEHIP_COPY_GBPS: every stream of a device shares one engine of that
// rate), so the Load can be no faster than bytes/rate, and with reading
// overlapped with copying it must come close to it.
func TestLoadKeepsThePacedCopyEngineBusy(t *testing.T) {
	const chunk = 2 << 20
	cfg := fakeConfig(t, fakeOptions{staging: chunk, env: map[string]string{"FAKEHIP_COPY_GBPS": "0.25"}})
	cfg.Staging.Readers = 3
	cfg.Staging.DirectIO = false
	gputest.CheckPacedFill(t, newBackend(t, cfg), 48<<20, chunk, 3, 0.25)
}

// BenchmarkFillThroughFakeCopyEngine is the fill pipeline through the fake
// HIP copy engine (unpaced: as fast as its stream threads copy), 64 MiB
// from the page cache in 4 MiB chunks into device memory already touched;
// `make bench` runs it with the hot paths' benchmarks.
func BenchmarkFillThroughFakeCopyEngine(b *testing.B) {
	dir := b.TempDir()
	cfg := DefaultConfig()
	cfg.Library = filepath.Join(os.Getenv(libDirEnv), "libamdhip64.so")
	cfg.AMDSMILibrary = filepath.Join(dir, "absent.so")
	cfg.SysfsRoot = dir
	cfg.Staging.Bytes = 4 << 20
	cfg.Staging.DirectIO = false
	be, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	gputest.BenchFill(b, be)
}

func TestCloseDuringLoad(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{staging: 64 << 10, env: map[string]string{"FAKEHIP_COPY_GBPS": "0.02"}})
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	gputest.CheckCloseDuringLoad(t, b)
}

// TestStagingPlacedOnTheGPUsNUMANode checks the lanes are made for the
// node sysfs names for the GPU's PCI address.
func TestStagingPlacedOnTheGPUsNUMANode(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{})
	dir := filepath.Join(cfg.SysfsRoot, "bus", "pci", "devices", "0000:c1:00.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b, err := New(cfg, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}))
	if err != nil {
		t.Fatal(err)
	}
	path, data := writeFile(t, 300_000, 10)
	id, _, err := b.Allocate(context.Background(), 0, uint64(len(data)))
	if err == nil {
		err = b.Load(context.Background(), id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil)
	}
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "numa_node=0") {
		t.Errorf("logs lack numa_node=0:\n%s", logs.String())
	}
}
