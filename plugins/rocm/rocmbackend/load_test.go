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

// TestLoadThroughThePacedCopyEngine paces the fake HIP's copy engine
// (FAKEHIP_COPY_GBPS: every stream of a device shares one engine of that
// rate), so the Load can be no faster than bytes/rate; how close it comes
// with reading overlapped is a figure (BenchmarkPacedFillOverlap), not a
// check. It checks the bytes and that the counters add up.
func TestLoadThroughThePacedCopyEngine(t *testing.T) {
	const chunk = 2 << 20
	cfg := fakeConfig(t, fakeOptions{staging: chunk, env: map[string]string{"FAKEHIP_COPY_GBPS": "0.25"}})
	cfg.Staging.Readers = 3
	cfg.Staging.DirectIO = false
	gputest.CheckPacedFill(t, newBackend(t, cfg), 48<<20, chunk, 3, 0.25)
}

// BenchmarkPacedFillOverlap reports how close a fill through the paced
// fake copy engine (FAKEHIP_COPY_GBPS=0.25) comes to the engine's time
// (engine_fraction, 1 when reading hides behind the copies): the figure
// TestLoadThroughThePacedCopyEngine asserted before, which load on the
// machine could break.
func BenchmarkPacedFillOverlap(b *testing.B) {
	const chunk = 2 << 20
	cfg := fakeConfig(b, fakeOptions{staging: chunk, env: map[string]string{"FAKEHIP_COPY_GBPS": "0.25"}})
	cfg.Staging.Readers = 3
	cfg.Staging.DirectIO = false
	gputest.BenchPacedFill(b, newBackend(b, cfg), 48<<20, 0.25)
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
	gputest.CheckLanesLogNUMANode(t, func(logger hclog.Logger) (*Backend, error) { return New(cfg, logger) }, "numa_node=0")
}
