package rocmbackend

import (
	"os"
	"path/filepath"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
)

// BenchmarkPacedFillOverlap reports how close a fill through the paced
// fake copy engine comes to the engine's time (engine_fraction, 1 when
// reading hides behind the copies): the figure
// TestLoadThroughThePacedCopyEngine asserted before, which load on the
// machine could break.
func BenchmarkPacedFillOverlap(b *testing.B) { gputest.BenchPacedFill(b, onFakes().Paced(b)) }

// BenchmarkFillThroughFakeCopyEngine is the fill pipeline through the fake
// HIP copy engine (unpaced: as fast as its stream threads copy), 64 MiB
// from the page cache in 4 MiB chunks into device memory already touched;
// `make bench` runs it with the hot paths' benchmarks.
func BenchmarkFillThroughFakeCopyEngine(b *testing.B) { onFakes().BenchFill(b) }

// TestStagingPlacedOnTheGPUsNUMANode checks the lanes are made for the
// node sysfs names for the GPU's PCI address.
func TestStagingPlacedOnTheGPUsNUMANode(t *testing.T) {
	cfg := fakeConfig(t, gputest.FakeOptions{})
	dir := filepath.Join(cfg.SysfsRoot, "bus", "pci", "devices", "0000:c1:00.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gputest.CheckLanesLogNUMANode(t, func(logger hclog.Logger) (*Backend, error) { return New(cfg, logger) }, "numa_node=0")
}
