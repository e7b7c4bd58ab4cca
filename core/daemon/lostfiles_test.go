package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
)

// TestRemovedRuntimeDirectory: the runtime directory of a serving daemon is
// removed (logind at logout) and recreated, and a second daemon starts on
// the same GPU. The first notices that its files are gone and stops by
// itself, removing nothing of the second's, which stays reachable.
func TestRemovedRuntimeDirectory(t *testing.T) {
	f := newFixture(t)
	run := filepath.Join(f.dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	layout, err := paths.NewLayout(paths.Options{
		SocketTemplate: filepath.Join(run, "{device_uuid}.sock"),
		ReadyTemplate:  filepath.Join(run, "{device_uuid}.ready"),
		Getenv:         func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	inRun := func(o *Options) { o.Layout = layout }

	first := f.start(0, inRun)
	if err := os.RemoveAll(run); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	second := f.start(0, inRun)
	p := second.d.Info().Paths
	before := map[string]os.FileInfo{}
	for _, path := range []string{p.Socket, p.Ready} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatalf("second daemon's %s: %v", path, err)
		}
		before[path] = fi
	}

	// The first daemon stops by itself: its lock file, socket and ready
	// file are gone, so it no longer owns the device.
	select {
	case <-first.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first daemon still runs 5s after its directory was removed")
	}
	if !errors.Is(first.Err(), daemonfile.ErrFileLost) {
		t.Errorf("first daemon's Run = %v, want ErrFileLost", first.Err())
	}

	// The second daemon's files are its own, untouched, and it serves.
	for path, fi := range before {
		now, err := os.Lstat(path)
		if err != nil || !os.SameFile(fi, now) {
			t.Fatalf("second daemon's %s was removed or replaced (%v)", path, err)
		}
	}
	r, err := daemonfile.ReadReady(p.Ready)
	if err != nil || r.PID != os.Getpid() {
		t.Fatalf("ready file: %+v, %v", r, err)
	}
	second.mustAttach(t)
	select {
	case <-second.Done():
		t.Fatalf("the second daemon stopped: %v", second.Err())
	default:
	}
}

// TestStopRemovesOnlyItsOwnFiles: files replaced at a daemon's paths while
// it serves are not its own and survive its stop.
func TestStopRemovesOnlyItsOwnFiles(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	p := r.d.Info().Paths
	// Someone replaces the ready file (same path, new inode) and the
	// daemon is stopped before its next check.
	if err := daemonfile.WriteReady(p.Ready, daemonfile.Ready{PID: 1, DeviceUUID: p.DeviceUUID}); err != nil {
		t.Fatal(err)
	}
	r.Cancel()
	if err := r.Wait(t); err != nil && !errors.Is(err, daemonfile.ErrFileLost) {
		t.Fatalf("run: %v", err)
	}
	if _, err := os.Lstat(p.Ready); err != nil {
		t.Errorf("the replaced ready file was removed: %v", err)
	}
	assertGone(t, p.Socket)
}

// TestRewrittenReadyFileIsNotLost: a Publish and an Evict replace the ready
// file; the daemon keeps it as its own and serves on past its file checks.
func TestRewrittenReadyFileIsNotLost(t *testing.T) {
	_, r, c := emptyDaemon(t)
	ctx := context.Background()
	stillRuns := func(after string) {
		t.Helper()
		select {
		case <-r.Done():
			t.Fatalf("the daemon stopped after %s: %v", after, r.Err())
		case <-time.After(3 * fileCheckInterval):
		}
	}
	res, err := c.Publish(ctx, publication(), client.ShmFill(fillBytes, false))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	stillRuns("a publish")
	ready, err := daemonfile.ReadReady(r.d.Info().Paths.Ready)
	if err != nil || ready.ConfigDigest != res.ConfigDigest {
		t.Fatalf("ready file after a publish = %+v, %v; want digest %s", ready, err, res.ConfigDigest)
	}
	if _, _, err := c.Evict(ctx, time.Second); err != nil {
		t.Fatalf("evict: %v", err)
	}
	stillRuns("an evict")
	if st, err := c.Status(ctx); err != nil || st.State != "empty" {
		t.Fatalf("status after evict = %+v, %v", st, err)
	}
}
