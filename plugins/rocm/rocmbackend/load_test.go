package rocmbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

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
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	ctx := context.Background()
	path, _ := writeFile(t, 10_000, 5)
	id, _, err := b.Allocate(ctx, 0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]sdk.Extent{
		"past the allocation": {Path: path, Length: 4096, DestOffset: 8000},
		"past the file":       {Path: path, FileOffset: 9000, Length: 2000},
		"missing file":        {Path: filepath.Join(t.TempDir(), "absent"), Length: 1},
	} {
		if err := b.Load(ctx, id, []sdk.Extent{e}, nil); !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("%s: Load = %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestLoadKeepsThePacedCopyEngineBusy paces the fake HIP's copy engine
// (FAKEHIP_COPY_GBPS: every stream of a device shares one engine of that
// rate), so the Load can be no faster than bytes/rate, and with reading
// overlapped with copying it must come close to it.
func TestLoadKeepsThePacedCopyEngineBusy(t *testing.T) {
	const size, chunk = 48 << 20, 2 << 20
	const gbps = 0.25
	cfg := fakeConfig(t, fakeOptions{staging: chunk, env: map[string]string{"FAKEHIP_COPY_GBPS": fmt.Sprint(gbps)}})
	cfg.Staging.Readers = 3
	cfg.Staging.DirectIO = false
	b := newBackend(t, cfg)
	ctx := context.Background()
	path, data := writeFile(t, size, 8)
	id, _, err := b.Allocate(ctx, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	// The first Load faults the fake's device memory in; measure the second.
	if err := b.Load(ctx, id, []sdk.Extent{{Path: path, Length: size}}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := b.LoadWithStats(ctx, id, []sdk.Extent{{Path: path, Length: size}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	engine := time.Duration(float64(size) / (gbps * 1e9) * float64(time.Second))
	t.Logf("engine time %v, fill %+v (%.2f of the engine's rate)", engine, st, engine.Seconds()/st.Wall.Seconds())
	if st.Wall < engine*95/100 {
		t.Errorf("fill took %v, less than the paced engine's %v: the copies were not paced", st.Wall, engine)
	}
	if st.Wall > engine*3/2 {
		t.Errorf("fill took %v, over 1.5× the engine's %v: reading and copying did not overlap", st.Wall, engine)
	}
	if st.Bytes != size || st.Readers != 3 || st.Chunks != size/chunk {
		t.Errorf("stats %+v, want %d bytes in %d chunks by 3 readers", st, size, size/chunk)
	}
	sums, err := b.Digest(ctx, id, []sdk.Range{{Length: size}})
	if err != nil || sums[0] != sha(data) {
		t.Fatalf("Digest after a paced load: %v", err)
	}
}

// BenchmarkFillThroughFakeCopyEngine is the fill pipeline through the fake
// HIP copy engine (unpaced: as fast as its stream threads copy), 64 MiB
// from the page cache in 4 MiB chunks into device memory already touched;
// `make bench` runs it with the hot paths' benchmarks.
func BenchmarkFillThroughFakeCopyEngine(b *testing.B) {
	const size = 64 << 20
	dir := b.TempDir()
	lib := filepath.Join(os.Getenv(libDirEnv), "libamdhip64.so")
	cfg := DefaultConfig()
	cfg.Library = lib
	cfg.AMDSMILibrary = filepath.Join(dir, "absent.so")
	cfg.SysfsRoot = dir
	cfg.Staging.Bytes = 4 << 20
	cfg.Staging.DirectIO = false
	be, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	data := bytes.Repeat([]byte("wcache-rocm-fill"), size/16)
	path := filepath.Join(dir, "weights")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	id, _, err := be.Allocate(ctx, 0, size)
	if err != nil {
		b.Fatal(err)
	}
	ext := []sdk.Extent{{Path: path, Length: size}}
	if err := be.Load(ctx, id, ext, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		if err := be.Load(ctx, id, ext, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCloseDuringLoad(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{staging: 64 << 10, env: map[string]string{"FAKEHIP_COPY_GBPS": "0.02"}})
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	path, _ := writeFile(t, 8<<20, 6)
	id, _, err := b.Allocate(ctx, 0, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Load(ctx, id, []sdk.Extent{{Path: path, Length: 8 << 20}}, nil) }()
	time.Sleep(50 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatalf("Close during a Load: %v", err)
	}
	if err := <-done; err == nil {
		t.Fatal("a Load cut short by Close succeeded")
	}
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
