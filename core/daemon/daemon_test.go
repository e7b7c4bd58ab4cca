package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/client/clienttest"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/sdk/names"
)

func TestStartServesManifestWithFileBytes(t *testing.T) {
	f := newFixture(t)
	var progressed uint64
	r := f.start(1, func(o *Options) { o.Progress = func(done, _ uint64) { progressed = done } })
	info := r.d.Info()
	if info.DeviceUUID != f.uuids[1] {
		t.Errorf("device UUID = %s, want %s", info.DeviceUUID, f.uuids[1])
	}
	if progressed != f.model.TotalBytes || info.Load.Bytes != f.model.TotalBytes {
		t.Errorf("progress %d, loaded %d, checkpoint %d bytes", progressed, info.Load.Bytes, f.model.TotalBytes)
	}
	if info.Load.Allocations != 1 || info.Load.Extents != 2 {
		t.Errorf("load = %+v, want one arena filled by one extent per file", info.Load)
	}

	// The socket is 0600 and the ready file names this process.
	fi, err := os.Lstat(info.Paths.Socket)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v", info.Paths.Socket, fi.Mode(), err)
	}
	ready, err := daemonfile.ReadReady(info.Paths.Ready)
	if err != nil {
		t.Fatal(err)
	}
	if ready.PID != os.Getpid() || ready.DeviceUUID != f.uuids[1] || ready.Socket != info.Paths.Socket ||
		ready.ConfigDigest != info.ConfigDigest || ready.Backend != "mock" {
		t.Errorf("ready file = %+v", ready)
	}

	a := r.mustAttach(t)
	m := a.Manifest
	if m.DeviceUUID != f.uuids[1] || m.ConfigDigest != info.ConfigDigest || len(m.Handles) != 1 ||
		m.Handles[0].Kind != names.KindPosixShm || m.LeaseID == 0 {
		t.Fatalf("manifest = %+v", m)
	}
	if len(m.Tensors) != len(f.model.Tensors) {
		t.Fatalf("manifest has %d tensors, checkpoint %d", len(m.Tensors), len(f.model.Tensors))
	}
	shm, err := os.ReadFile(string(m.Handles[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range m.Tensors {
		gen, ok := f.model.Tensor(0, tn.Name)
		if !ok {
			t.Fatalf("manifest tensor %s not in the checkpoint", tn.Name)
		}
		if tn.DType != string(gen.DType) || fmt.Sprint(tn.Shape) != fmt.Sprint(gen.Shape) {
			t.Errorf("%s: %s %v, want %s %v", tn.Name, tn.DType, tn.Shape, gen.DType, gen.Shape)
		}
		if !bytes.Equal(shm[tn.Offset:tn.Offset+tn.Length], gen.Data()) {
			t.Fatalf("tensor %s: device bytes differ from the file's", tn.Name)
		}
	}

	st, err := r.dial(t).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.DeviceUUID != f.uuids[1] || st.State != "serving" || st.Tensors != len(m.Tensors) || st.Bytes != info.Load.Bytes ||
		len(st.Leases) != 1 || st.Leases[0].PID != int32(os.Getpid()) || st.Leases[0].ClientName != t.Name() ||
		st.Goroutines == 0 || st.OpenFDs == 0 {
		t.Errorf("status = %+v", st)
	}
	// The start-up's phases as the daemon measured them: each ran, and
	// together they fit in the total.
	ph := st.StartPhases
	if ph.BytesLoaded != info.Load.Bytes || ph.BytesAllocated < ph.BytesLoaded || ph.Load != info.Load.Duration ||
		ph.Plan <= 0 || ph.Lock <= 0 || ph.Allocate <= 0 || ph.Load <= 0 || ph.Export <= 0 ||
		ph.Plan+ph.Lock+ph.Allocate+ph.Load+ph.Export > ph.Total {
		t.Errorf("start phases = %+v, load stats %+v", ph, info.Load)
	}
	// No sibling holds the weights: read from the files, no fallback.
	if st.FilledFrom != FilledFromFiles || st.FillFallback != "" || ph.BytesFromPeer != 0 ||
		len(st.Generations) != 1 || st.Generations[0].FilledFrom != FilledFromFiles {
		t.Errorf("filled from %q (fallback %q), %d bytes from a peer, generations %+v", st.FilledFrom, st.FillFallback,
			ph.BytesFromPeer, st.Generations)
	}
}

func TestAttachMismatchListsEveryField(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	_, err := r.attach(t, func(c *cacheconfig.Config) {
		c.TPRank, c.TPSize = 1, 2
		c.DType = "fp16"
		c.CheckpointDigest = "sha256:" + strings.Repeat("0", 64)
	})
	me, ok := client.IsMismatch(err)
	if !ok {
		t.Fatalf("err = %v, want a mismatch", err)
	}
	got := map[string]cacheconfig.FieldDiff{}
	for _, d := range me.Diffs {
		got[d.Field] = d
	}
	for _, field := range []string{"tp_size", "tp_rank", "checkpoint_digest"} {
		if _, ok := got[field]; !ok {
			t.Errorf("diff lacks %s: %+v", field, me.Diffs)
		}
	}
	// The daemon's dtype is "auto" and both sides carry a digest: any dtype matches.
	if d, ok := got["dtype"]; ok {
		t.Errorf("dtype differs from the daemon's auto: %+v", d)
	}
	if d := got["tp_rank"]; d.Daemon != "0" || d.Client != "1" {
		t.Errorf("tp_rank diff = %+v", d)
	}
	if len(r.d.Leases()) != 0 {
		t.Errorf("a refused attach left a lease")
	}
	// No config at all is a structured error too.
	c := r.dial(t)
	if _, err := c.Attach(context.Background(), cacheconfig.Config{}); err == nil {
		t.Error("attach with an empty config succeeded")
	}
}

func TestStopDrainsNotifiesAndRemovesFiles(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	a := r.mustAttach(t)
	info := r.d.Info()
	released := make(chan struct{})
	go func() {
		n := <-a.Lease.Notices()
		if n.Kind != client.NoticeDraining || n.Deadline.IsZero() {
			t.Errorf("notice = %+v", n)
		}
		a.Lease.Close()
		close(released)
	}()
	n, err := r.dial(t).Stop(context.Background(), false, 5*time.Second)
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	<-released
	if n != 1 {
		t.Errorf("leases at stop = %d, want 1", n)
	}
	if err := r.Wait(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	assertGone(t, info.Paths.Socket, info.Paths.Ready)
	entries, _ := os.ReadDir(f.shm)
	if len(entries) != 0 {
		t.Errorf("allocations left in %s: %v", f.shm, entries)
	}
	// The lock is free again: a new daemon starts on the same device.
	f.start(0, nil)
}

func TestStopDrainTimeoutKeepsServing(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	a := r.mustAttach(t)
	c := r.dial(t)
	_, err := c.Stop(context.Background(), false, 200*time.Millisecond)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("stop err = %v, want FAILED_PRECONDITION naming the lease", err)
	}
	select {
	case n := <-a.Lease.Notices():
		if n.Kind != client.NoticeDraining {
			t.Errorf("notice = %+v", n)
		}
	case <-time.After(2 * time.Second):
		t.Error("lease got no drain notice")
	}
	select {
	case <-a.Lease.Done():
		t.Fatalf("lease ended: %v", a.Lease.Err())
	default:
	}
	// Still serving: a new client attaches.
	b := r.mustAttach(t)
	if b.Manifest.LeaseID == a.Manifest.LeaseID {
		t.Error("lease ids repeat")
	}
	// Force ends both leases with UNAVAILABLE.
	if n, err := c.Stop(context.Background(), true, 0); err != nil || n != 2 {
		t.Fatalf("force stop = %d, %v", n, err)
	}
	for _, l := range []*client.Lease{a.Lease, b.Lease} {
		select {
		case <-l.Done():
			if status.Code(l.Err()) != codes.Unavailable {
				t.Errorf("lease err = %v, want UNAVAILABLE", l.Err())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("lease not ended by a forced stop")
		}
	}
	if err := r.Wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestCancelDrainsThenStopsAnyway(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, func(o *Options) { o.DrainTimeout = 300 * time.Millisecond })
	a := r.mustAttach(t)
	begin := time.Now()
	r.Cancel()
	if err := r.Wait(t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	if d := time.Since(begin); d < 300*time.Millisecond {
		t.Errorf("stopped after %s without waiting for the drain timeout", d)
	}
	<-a.Lease.Done()
	if status.Code(a.Lease.Err()) != codes.Unavailable {
		t.Errorf("lease err = %v", a.Lease.Err())
	}
	assertGone(t, r.d.Info().Paths.Socket, r.d.Info().Paths.Ready)
}

func TestPluginExitEndsLeasesAndFails(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	a := r.mustAttach(t)
	r.p.Crash("signal: killed")
	err := r.Wait(t)
	if !errors.Is(err, ErrPluginExited) || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("run = %v, want ErrPluginExited with the exit reason", err)
	}
	<-a.Lease.Done()
	if status.Code(a.Lease.Err()) != codes.Unavailable || !strings.Contains(a.Lease.Err().Error(), "backend plugin exited") {
		t.Errorf("lease err = %v", a.Lease.Err())
	}
	assertGone(t, r.d.Info().Paths.Socket, r.d.Info().Paths.Ready)
}

func TestStartFailureUndoesEverything(t *testing.T) {
	f := newFixture(t)
	p := f.plugin(func(b *mock.Backend) {
		b.ExportFunc = func(context.Context, sdk.AllocationID) (sdk.Handle, error) {
			return sdk.Handle{}, sdk.Errorf(sdk.ErrUnsupported, "injected failure")
		}
	})
	_, err := Start(context.Background(), p, f.options(0))
	if err == nil || !strings.Contains(err.Error(), "export") {
		t.Fatalf("start = %v, want the export failure", err)
	}
	select {
	case <-p.Closed():
	default:
		t.Error("the plugin was not closed")
	}
	pp, _ := f.layout.For(f.uuids[0])
	assertGone(t, pp.Socket, pp.Ready)
	entries, _ := os.ReadDir(f.shm)
	if len(entries) != 0 {
		t.Errorf("allocations left: %v", entries)
	}
	f.start(0, nil) // the lock was released
}

func TestStartRefusesLiveDaemonOfSameDevice(t *testing.T) {
	f := newFixture(t)
	f.start(0, nil)
	_, err := Start(context.Background(), f.plugin(nil), f.options(0))
	var live *daemonfile.LiveDaemonError
	if !errors.As(err, &live) || live.PID != os.Getpid() {
		t.Fatalf("second start = %v, want *LiveDaemonError naming this pid", err)
	}
	// Another device is independent.
	f.start(1, nil)
}

func TestStartRejectsBadInput(t *testing.T) {
	f := newFixture(t)
	for name, edit := range map[string]func(*Options){
		"missing model":     func(o *Options) { o.Model = f.dir + "/nope" },
		"no shards":         func(o *Options) { o.ShardPattern = "model-rank-{tp_rank}-part-*.safetensors" },
		"bad config":        func(o *Options) { o.Config.TPRank = 5 },
		"unknown GPU":       func(o *Options) { o.GPU = 7 },
		"arena too small":   func(o *Options) { o.Plan.MaxArenaBytes = 4096 },
		"bad socket parent": func(o *Options) { o.Layout.Socket = mustTemplate(t, "/nonexistent-dir/{device_uuid}.sock") },
	} {
		t.Run(name, func(t *testing.T) {
			o := f.options(0)
			edit(&o)
			if _, err := Start(context.Background(), f.plugin(nil), o); err == nil {
				t.Fatal("start succeeded")
			}
			pp, _ := f.layout.For(f.uuids[0])
			assertGone(t, pp.Socket, pp.Ready)
		})
	}
}

func TestShardPatternLoadsOnlyTheRanksFiles(t *testing.T) {
	f := newFixture(t)
	res, err := safetensorsGenerate(f.dir+"/sharded", 2)
	if err != nil {
		t.Fatal(err)
	}
	r := f.start(0, func(o *Options) {
		o.Model = res.Dir
		o.ShardPattern = "model-rank-{tp_rank}-part-*.safetensors"
		o.Config.TPSize, o.Config.TPRank = 2, 1
	})
	if got, want := fmt.Sprint(r.d.Info().Files), fmt.Sprint(res.RankFiles(1)); got != want {
		t.Errorf("files = %s, want %s", got, want)
	}
	// Pre-sharded: the client names the rank's files (cfg.Model's
	// directory holds every rank's).
	c := r.dial(t)
	a, err := c.AttachFiles(context.Background(), r.d.Info().Config, res.RankFiles(1), client.ContentOptions{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Lease.Close()
	shm, err := os.ReadFile(string(a.Manifest.Handles[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range a.Manifest.Tensors {
		gen, ok := res.Tensor(1, tn.Name)
		if !ok || !bytes.Equal(shm[tn.Offset:tn.Offset+tn.Length], gen.Data()) {
			t.Fatalf("tensor %s is not rank 1's", tn.Name)
		}
	}
}

// TestRelativeModelDirectory: a relative --model works; the plugin gets
// absolute paths whatever its working directory.
func TestRelativeModelDirectory(t *testing.T) {
	f := newFixture(t)
	t.Chdir(f.dir)
	r := f.start(0, func(o *Options) { o.Model = "model" })
	if got, want := r.d.Info().Model, filepath.Join(f.dir, "model"); got != want {
		t.Errorf("model = %s, want %s", got, want)
	}
	a := r.mustAttach(t)
	if len(a.Manifest.Tensors) != len(f.model.Tensors) {
		t.Fatalf("manifest has %d tensors, checkpoint %d", len(a.Manifest.Tensors), len(f.model.Tensors))
	}
}

// TestManyClientsConcurrently attaches and releases from many goroutines at
// once and checks nothing leaks.
func TestManyClientsConcurrently(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	c := r.dial(t)
	before, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.d.Info().Config
	err = clienttest.AttachRounds(64, 5, func() (*client.Attachment, error) {
		return client.Attach(context.Background(), client.BySocket(r.d.Info().Paths.Socket), cfg, client.Options{})
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "leases released", func() bool { return len(r.d.Leases()) == 0 })
	var after *client.Status
	waitFor(t, "goroutines and fds back", func() bool {
		after, err = c.Status(context.Background())
		return err == nil && after.Goroutines <= before.Goroutines+2 && after.OpenFDs <= before.OpenFDs
	})
}

// TestAttachesBeyondTheStreamWorkers holds more leases than the gRPC server
// has stream workers (each held lease keeps its Attach's worker busy): a
// further Attach and a Status on a connection of its own are still served,
// and every lease ends when released.
func TestAttachesBeyondTheStreamWorkers(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	cfg := r.d.Info().Config
	target := client.BySocket(r.d.Info().Paths.Socket)
	held := make([]*client.Attachment, 0, 2*runtime.GOMAXPROCS(0)+2)
	defer func() {
		for _, a := range held {
			a.Lease.Close()
		}
	}()
	for range cap(held) {
		a, err := client.Attach(context.Background(), target, cfg, client.Options{})
		if err != nil {
			t.Fatalf("attach %d: %v", len(held)+1, err)
		}
		held = append(held, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	extra, err := client.Attach(ctx, target, cfg, client.Options{})
	if err != nil {
		t.Fatalf("attach beyond %d held leases: %v", len(held), err)
	}
	held = append(held, extra)
	st, err := r.dial(t).Status(ctx)
	if err != nil {
		t.Fatalf("status beside %d held leases: %v", len(held), err)
	}
	if len(st.Leases) != len(held) {
		t.Errorf("status counts %d leases, want %d", len(st.Leases), len(held))
	}
	for _, a := range held {
		if err := a.Lease.Close(); err != nil {
			t.Fatal(err)
		}
	}
	held = nil
	waitFor(t, "leases released", func() bool { return len(r.d.Leases()) == 0 })
}

func TestListenUnixReplacesStaleSocketOnly(t *testing.T) {
	f := newFixture(t)
	path := f.dir + "/x.sock"
	l, err := ListenUnix(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // leaves the file: a stale socket
	l2, err := ListenUnix(path, nil)
	if err != nil {
		t.Fatalf("replacing a stale socket: %v", err)
	}
	l2.Close()
	reg := f.dir + "/regular"
	if err := os.WriteFile(reg, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(reg, nil); err == nil {
		t.Fatal("listen replaced a regular file")
	}
	if b, _ := os.ReadFile(reg); string(b) != "keep" {
		t.Error("regular file clobbered")
	}
	entries, _ := os.ReadDir(f.dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".wcb") {
			t.Errorf("temporary bind directory %s left behind", e.Name())
		}
	}
}

func TestSocketGroupMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs as root (it chowns a socket to gid 65534)")
	}
	f := newFixture(t)
	gid := uint32(65534)
	r := f.start(0, func(o *Options) { o.SocketGID = &gid })
	fi, err := os.Lstat(r.d.Info().Paths.Socket)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Gid != gid {
		t.Errorf("socket mode %v gid %d, want 0660 gid %d", fi.Mode().Perm(), st.Gid, gid)
	}
}

func TestPluginExitDuringDrainStopsAtOnce(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, func(o *Options) { o.DrainTimeout = time.Minute })
	a := r.mustAttach(t)
	r.Cancel() // SIGTERM: a long drain begins
	select {
	case <-a.Lease.Notices():
	case <-time.After(5 * time.Second):
		t.Fatal("no drain notice")
	}
	r.p.Crash("signal: killed")
	if err := r.Wait(t); !errors.Is(err, ErrPluginExited) {
		t.Fatalf("run = %v, want ErrPluginExited without waiting for the drain", err)
	}
	<-a.Lease.Done()
}

// TestSilentConnectionsDoNotBlockOthers: clients that connect and say
// nothing (or hold a lease and never read) do not delay anyone else.
func TestSilentConnectionsDoNotBlockOthers(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	for i := 0; i < 8; i++ {
		c, err := net.Dial("unix", r.d.Info().Paths.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	r.mustAttach(t) // a lease whose client never reads its stream again
	for i := 0; i < 5; i++ {
		a := r.mustAttach(t) // within attach's own deadline
		a.Lease.Close()
	}
}
