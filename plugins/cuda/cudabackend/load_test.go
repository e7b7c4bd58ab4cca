package cudabackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk"
)

// TestLoadThroughSmallStaging loads extents much larger than the staging
// buffers while the fake driver delays every asynchronous copy (see
// gputest.CheckLoadExtents).
func TestLoadThroughSmallStaging(t *testing.T) {
	for _, tc := range []struct {
		buffers  int
		directIO bool
	}{{2, true}, {3, true}, {2, false}} {
		t.Run(fmt.Sprintf("buffers=%d/direct=%v", tc.buffers, tc.directIO), func(t *testing.T) {
			cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKECUDA_COPY_DELAY_US": "200"}})
			cfg.Staging.Buffers = tc.buffers
			cfg.Staging.DirectIO = tc.directIO
			gputest.CheckLoadExtents(t, newBackend(t, cfg), 0)
		})
	}
}

func TestLoadRejectsBadExtentsBeforeCopying(t *testing.T) {
	gputest.CheckLoadRejectsBadExtents(t, newBackend(t, fakeConfig(t, fakeOptions{})))
}

func TestLoadCancelledLeavesBackendUsable(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKECUDA_COPY_DELAY_US": "100"}})
	b := newBackend(t, cfg)
	path, data := writeFile(t, 12<<20, 6)
	id, _, err := b.Allocate(context.Background(), 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ext := []sdk.Extent{{Path: path, Length: uint64(len(data))}}
	err = b.Load(ctx, id, ext, func(done, total uint64) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Load = %v, want context.Canceled", err)
	}
	if err := b.Load(context.Background(), id, ext, nil); err != nil {
		t.Fatalf("Load after a cancelled one: %v", err)
	}
	sums, err := b.Digest(context.Background(), id, []sdk.Range{{Length: uint64(len(data))}})
	if err != nil || sums[0] != sha(data) {
		t.Fatalf("Digest after reload: %v", err)
	}
}

func TestCloseDuringLoad(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKECUDA_COPY_DELAY_US": "100"}})
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	gputest.CheckCloseDuringLoad(t, b)
}

// pacedBackend opens a Backend for gputest's paced fill (see
// gputest.PacedSize): the fake driver's copy engine paced at gputest.PacedGBPS.
func pacedBackend(tb testing.TB) *Backend {
	cfg := fakeConfig(tb, fakeOptions{staging: gputest.PacedChunk, env: map[string]string{"FAKECUDA_COPY_GBPS": fmt.Sprint(gputest.PacedGBPS)}})
	cfg.Staging.Readers = gputest.PacedReaders
	cfg.Staging.DirectIO = false
	return newBackend(tb, cfg)
}

// TestLoadThroughThePacedCopyEngine runs the fill against the fake's
// paced copy engine (FAKECUDA_COPY_GBPS: every stream of the device shares one
// engine of that rate), so the Load can be no faster than bytes/rate; how
// close it comes with reading overlapped is a figure
// (BenchmarkPacedFillOverlap), not a check. It checks the bytes and that
// the counters add up.
func TestLoadThroughThePacedCopyEngine(t *testing.T) { gputest.CheckPacedFill(t, pacedBackend(t)) }

// BenchmarkPacedFillOverlap reports how close a fill through the paced
// fake copy engine comes to the engine's time (engine_fraction, 1 when
// reading hides behind the copies): the figure
// TestLoadThroughThePacedCopyEngine asserted before, which load on the
// machine could break.
func BenchmarkPacedFillOverlap(b *testing.B) { gputest.BenchPacedFill(b, pacedBackend(b)) }

// TestLoadsOfSeveralAllocationsShareTheLanes runs Loads into four
// allocations at once with fewer lanes than Loads × readers.
func TestLoadsOfSeveralAllocationsShareTheLanes(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{staging: 64 << 10, env: map[string]string{"FAKECUDA_COPY_GBPS": "2", "FAKECUDA_COPY_DELAY_US": "50"}})
	cfg.Staging.Readers = 2
	b := newBackend(t, cfg)
	ctx := context.Background()
	path, data := writeFile(t, 3<<20+77, 9)
	ids := make([]sdk.AllocationID, 4)
	for i := range ids {
		id, _, err := b.Allocate(ctx, 0, uint64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errs <- b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil) }()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		sums, err := b.Digest(ctx, id, []sdk.Range{{Length: uint64(len(data))}})
		if err != nil || sums[0] != sha(data) {
			t.Fatalf("allocation %d: Digest %v", i, err)
		}
	}
}

// TestStagingPlacedOnTheGPUsNUMANode points the backend at a sysfs that
// puts device 0 on node 0 and checks the lanes are made for that node
// (the placement itself is set_mempolicy, tested in plugins/internal/staging).
func TestStagingPlacedOnTheGPUsNUMANode(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    string
	}{{"0\n", "numa_node=0"}, {"-1\n", "numa_node=-1"}, {"", "numa_node=-1"}} {
		cfg := fakeConfig(t, fakeOptions{})
		b := newBackend(t, cfg)
		devs, err := b.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cfg.SysfsRoot = t.TempDir()
		if tc.content != "" {
			dir := filepath.Join(cfg.SysfsRoot, "bus", "pci", "devices", staging.SysfsBusID(devs[0].PCIBusID))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(tc.want, func(t *testing.T) {
			gputest.CheckLanesLogNUMANode(t, func(logger hclog.Logger) (*Backend, error) { return New(cfg, logger) }, tc.want)
		})
	}
}

// BenchmarkFillThroughFakeCopyEngine is the fill pipeline through the fake
// driver's copy engine (unpaced: as fast as its stream threads copy),
// 64 MiB from the page cache in 4 MiB chunks into device memory already
// touched; `make bench` runs it with the hot paths' benchmarks.
func BenchmarkFillThroughFakeCopyEngine(b *testing.B) {
	dir := b.TempDir()
	cfg := DefaultConfig()
	cfg.Library = filepath.Join(os.Getenv(libDirEnv), "libcuda.so.1")
	cfg.NVMLLibrary = filepath.Join(dir, "absent.so")
	cfg.SysfsRoot = dir
	cfg.Staging.Bytes = 4 << 20
	cfg.Staging.DirectIO = false
	gputest.BenchFill(b, newBackend(b, cfg))
}
