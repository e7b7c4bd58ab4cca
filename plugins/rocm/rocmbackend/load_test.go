package rocmbackend

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/gputest"
)

// TestLoadThroughSmallStaging loads extents much larger than the staging
// buffers while the fake delays every asynchronous copy, on device 1 (so
// a reader whose thread lacks hipSetDevice would queue onto device 0's
// stream, which the fake refuses; see gputest.CheckLoadExtents).
func TestLoadThroughSmallStaging(t *testing.T) {
	for _, buffers := range []int{2, 3} {
		t.Run(fmt.Sprint("buffers=", buffers), func(t *testing.T) {
			cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKEHIP_COPY_DELAY_US": "200"}})
			cfg.Staging.Buffers = buffers
			gputest.CheckLoadExtents(t, newBackend(t, cfg), 1)
		})
	}
}

func TestLoadRejectsBadExtentsBeforeCopying(t *testing.T) {
	gputest.CheckLoadRejectsBadExtents(t, newBackend(t, fakeConfig(t, fakeOptions{})))
}

// pacedBackend opens a Backend for gputest's paced fill (see
// gputest.PacedSize): the fake HIP's copy engine paced at gputest.PacedGBPS.
func pacedBackend(tb testing.TB) *Backend {
	cfg := fakeConfig(tb, fakeOptions{staging: gputest.PacedChunk, env: map[string]string{"FAKEHIP_COPY_GBPS": fmt.Sprint(gputest.PacedGBPS)}})
	cfg.Staging.Readers = gputest.PacedReaders
	cfg.Staging.DirectIO = false
	return newBackend(tb, cfg)
}

// TestLoadThroughThePacedCopyEngine runs the fill against the fake's
// paced copy engine (FAKEHIP_COPY_GBPS: every stream of the device shares one
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
	gputest.BenchFill(b, newBackend(b, cfg))
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
	gputest.CheckLanesLogNUMANode(t, func(logger hclog.Logger) (*Backend, error) { return New(cfg, logger) }, "numa_node=0")
}
