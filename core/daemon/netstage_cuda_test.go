package daemon

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/daemon/daemontest/testplugin"
	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/core/daemon/fill/filltest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/sdk/names"
)

// fakeCUDA builds wcache-backend-cuda and the fake CUDA driver
// (plugins/cuda/testdata/fakecuda, with gcc: the test is skipped without
// it) into the test's folders.
func fakeCUDA(t *testing.T) (plugin, lib string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the fake CUDA driver is built with it")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	plugin = backendtest.BuildPluginT(t, "cuda", filepath.Join(root, "plugins", "cuda"), "CGO_ENABLED=1")
	lib = filepath.Join(t.TempDir(), "libcuda.so.1")
	src := filepath.Join(root, "plugins", "cuda", "testdata", "fakecuda", "fakecuda.c")
	include := filepath.Join(root, "plugins", "internal", "testkit", "fakelib", "include")
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-I", include, "-o", lib, src, "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, out)
	}
	return plugin, lib
}

// startFakeCUDA starts the plugin as a process, a child of this one as
// the daemon's plugin is, on the fake driver lib with the fixture's two
// devices (their UUIDs), and extra environment env.
func startFakeCUDA(t *testing.T, f *fixture, plugin, lib string, env ...string) *testplugin.Plugin {
	t.Helper()
	var uuids []string
	for _, u := range f.uuids {
		uuids = append(uuids, strings.ReplaceAll(strings.TrimPrefix(u, "GPU-"), "-", ""))
	}
	b := backendtest.StartPlugin(t, plugin, append([]string{
		"WCACHE_CUDA_LIBRARY=" + lib,
		"WCACHE_NVML_LIBRARY=" + filepath.Join(filepath.Dir(lib), "no-nvml.so"),
		"WCACHE_CUDA_HEALTH_INTERVAL=0",
		"FAKECUDA_DEVICES=" + strings.Join(uuids, ","),
		"FAKECUDA_MEMORY=" + strconv.Itoa(256<<20),
	}, env...)...)
	return testplugin.New(b, nil)
}

// childStagingMemfds counts the staging memfds open in this process's
// children whose name starts with wcache-backend- (the plugin: what it
// opened through /proc/<pid>/fd/<n> and did not close).
func childStagingMemfds(t *testing.T) (children, open int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			continue
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) < 2 || f[1] != self {
			continue
		}
		if comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); !bytes.HasPrefix(comm, []byte("wcache-backend-")) {
			continue
		}
		children++
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); err == nil && filltest.IsStagingMemfd(target, fill.StageMemfdName) {
				open++
			}
		}
	}
	return children, open
}

// TestFilledFromPeerThroughCUDAPlugin: daemon B runs over the real
// wcache-backend-cuda process on the fake driver (device memory, cuda-ipc
// handles) and fills from A's peer endpoint: the plugin Loads each window
// from the daemon's staging memfd by /proc/<pid>/fd/<n> (its own fill
// pipeline: buffered, and with O_DIRECT forced, which a memfd refuses or
// takes). B's Status says filled from A; VerifyLoad compared every
// tensor's device bytes with the files; the device bytes read back
// through the plugin equal the files'; no staging memfd stays open, in
// the daemon or the plugin.
func TestFilledFromPeerThroughCUDAPlugin(t *testing.T) {
	plugin, lib := fakeCUDA(t)
	for _, direct := range []string{"0", "1"} {
		t.Run("direct io "+direct, func(t *testing.T) {
			f := newFixture(t)
			a, creds := peerPair(t, f, true)
			p := startFakeCUDA(t, f, plugin, lib, "WCACHE_CUDA_DIRECT_IO="+direct)
			b := f.startWith(1, p, func(o *Options) {
				otherNode(t, o)
				o.VerifyLoad = true
				o.Peer = PeerOptions{Peers: []string{a.d.PeerAddr()}, Creds: creds, StageWindowBytes: filltest.StageWindow}
			})
			checkFilledFromPeer(t, a, b)
			if bi, err := p.Backend().Info(context.Background()); err != nil || slices.Contains(bi.HandleKinds, names.KindMemfd) {
				t.Fatalf("the CUDA plugin: %+v, %v: the test needs device memory", bi, err)
			}
			checkDeviceBytes(t, b.d, f.model.Dir)
			if n := filltest.OpenStagingMemfds(t, fill.StageMemfdName); n != 0 {
				t.Errorf("%d staging memfds open in the daemon after the fill", n)
			}
			if children, n := childStagingMemfds(t); children == 0 || n != 0 {
				t.Errorf("plugin processes %d, staging memfds open in them %d: want a plugin, none open", children, n)
			}
		})
	}
}

// checkDeviceBytes reads d's serving generation back through its backend,
// extent by extent, and compares it with the checkpoint in dir.
func checkDeviceBytes(t *testing.T, d *Daemon, dir string) {
	t.Helper()
	ctx := context.Background()
	job, err := d.prepare(ctx, Source{Model: dir, Config: d.Info().Config})
	if err != nil {
		t.Fatal(err)
	}
	var allocs []sdk.AllocationID
	d.reg.ForEachServing(func(g *generation) { allocs = slices.Clone(g.Allocs) })
	if len(allocs) != len(job.pl.Allocations) {
		t.Fatalf("%d arenas served, the plan has %d", len(allocs), len(job.pl.Allocations))
	}
	checked := uint64(0)
	for ai, a := range job.pl.Allocations {
		for _, e := range a.Extents {
			want := make([]byte, e.Length)
			fl, err := os.Open(e.Path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = fl.ReadAt(want, int64(e.FileOffset))
			fl.Close()
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			for off := e.DestOffset; off < e.DestOffset+e.Length; {
				b, err := d.backend.Read(ctx, allocs[ai], off, min(sdk.MaxReadBytes, e.DestOffset+e.Length-off))
				if err != nil || len(b) == 0 {
					t.Fatalf("arena %d at %d: read %d bytes: %v", ai, off, len(b), err)
				}
				got, off = append(got, b...), off+uint64(len(b))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("arena %d at %d: the device bytes differ from %s at %d", ai, e.DestOffset, e.Path, e.FileOffset)
			}
			checked += e.Length
		}
	}
	if checked != job.pl.Bytes {
		t.Fatalf("checked %d bytes of %d", checked, job.pl.Bytes)
	}
}
