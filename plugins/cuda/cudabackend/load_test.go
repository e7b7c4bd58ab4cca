package cudabackend

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
)

// BenchmarkPacedFillOverlap reports how close a fill through the paced
// fake copy engine comes to the engine's time (engine_fraction, 1 when
// reading hides behind the copies): the figure
// TestLoadThroughThePacedCopyEngine asserted before, which load on the
// machine could break.
func BenchmarkPacedFillOverlap(b *testing.B) { gputest.BenchPacedFill(b, onFakes().Paced(b)) }

// TestStagingPlacedOnTheGPUsNUMANode points the backend at a sysfs that
// puts device 0 on node 0 and checks the lanes are made for that node
// (the placement itself is set_mempolicy, tested in plugins/internal/staging).
func TestStagingPlacedOnTheGPUsNUMANode(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    string
	}{{"0\n", "numa_node=0"}, {"-1\n", "numa_node=-1"}, {"", "numa_node=-1"}} {
		cfg := fakeConfig(t, gputest.FakeOptions{})
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
func BenchmarkFillThroughFakeCopyEngine(b *testing.B) { onFakes().BenchFill(b) }
