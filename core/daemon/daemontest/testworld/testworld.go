// Package testworld is the half of daemontest that does not need
// core/daemon: a test's world (a short private folder, a layout in it and
// a generated checkpoint), the Run loop of a daemon the test watches, and
// an attach to it. daemontest builds Start on it; the tests of core/daemon
// itself, which cannot import daemontest (it imports core/daemon), use it
// directly, so that both start their daemons the same way.
package testworld

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// DefaultUUID is the device of a world whose Options name none.
const DefaultUUID = "GPU-0badc0de-0000-4000-8000-000000000001"

// StopTimeout bounds how long Wait and the cleanup wait for Run to return.
const StopTimeout = 10 * time.Second

// AttachTimeout bounds Attach.
const AttachTimeout = 5 * time.Second

// Options configure New. The zero value is a world of one device
// (DefaultUUID) and a generated two-shard checkpoint.
type Options struct {
	// Checkpoint tunes the generated checkpoint (Shards 0: two shards).
	Checkpoint safetensorstest.GenOptions
	// UUIDs are the world's devices (default: DefaultUUID alone).
	UUIDs []string
}

// World is one test's folder and what lies in it.
type World struct {
	// Dir is the private folder of the sockets, ready files, checkpoint
	// and backend files; removed at cleanup.
	Dir string
	// Layout puts every device's socket, ready and lock file in Dir.
	Layout paths.Layout
	// Model is the generated checkpoint, in Dir/model.
	Model *safetensorstest.Result
	// Shm is the folder for a mock backend's files, Dir/shm (not created).
	Shm string
	// UUIDs are the devices, for the backend the test builds.
	UUIDs []string
}

// New makes a world and registers the removal of its folder. Failures end
// the test.
func New(t testing.TB, o Options) *World {
	t.Helper()
	dir, layout := Folder(t)
	gen := o.Checkpoint
	if gen.Shards == 0 {
		gen.Shards = 2
	}
	model, err := safetensorstest.GenerateCheckpoint(filepath.Join(dir, "model"), gen)
	if err != nil {
		t.Fatal(err)
	}
	uuids := o.UUIDs
	if len(uuids) == 0 {
		uuids = []string{DefaultUUID}
	}
	return &World{Dir: dir, Layout: layout, Model: model, Shm: filepath.Join(dir, "shm"), UUIDs: uuids}
}

// Folder makes a short private folder, removed at cleanup, and a layout
// that puts every device's socket, ready and lock file in it. Failures end
// the test.
func Folder(t testing.TB) (string, paths.Layout) {
	t.Helper()
	dir := pathstest.ShortDir(t)
	layout, err := paths.InDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, layout
}

// Runner is what Run runs: a started *daemon.Daemon.
type Runner interface {
	Run(ctx context.Context) error
}

// Running is a Runner whose Run goroutine the test watches.
type Running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Run runs r in a goroutine and registers a cleanup that cancels its
// context and waits up to StopTimeout for Run to return (an error of the
// test if it does not).
func Run(t testing.TB, r Runner) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	run := &Running{cancel: cancel, done: make(chan struct{})}
	go func() {
		run.err = r.Run(ctx)
		close(run.done)
	}()
	t.Cleanup(func() {
		cancel()
		if _, err := run.wait(StopTimeout); err != nil {
			t.Error(err)
		}
	})
	return run
}

// Cancel cancels Run's context: a daemon drains and stops.
func (r *Running) Cancel() { r.cancel() }

// Done is closed when Run has returned.
func (r *Running) Done() <-chan struct{} { return r.done }

// Err is what Run returned; nil while Done is open.
func (r *Running) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Wait waits up to StopTimeout for Run to return and returns its result;
// a Run still going then ends the test.
func (r *Running) Wait(t testing.TB) error {
	t.Helper()
	runErr, err := r.wait(StopTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return runErr
}

func (r *Running) wait(within time.Duration) (runErr, err error) {
	select {
	case <-r.done:
		return r.err, nil
	case <-time.After(within):
		return nil, fmt.Errorf("testworld: daemon did not stop within %v", within)
	}
}

// Attach attaches a client named after the test to the daemon on socket,
// asking for cfg (the daemon's own config, as a rule) edited by edit (nil:
// unchanged), within AttachTimeout. It proves the files cfg.Model names
// under "identity" without the user's digest cache (AttachProving).
func Attach(t testing.TB, socket string, cfg cacheconfig.Config, edit func(*cacheconfig.Config)) (*client.Attachment, error) {
	t.Helper()
	if edit != nil {
		edit(&cfg)
	}
	return AttachProving(t, socket, cfg, cacheconfig.PolicyIdentity)
}

// AttachProving is Attach under content policy policy, with no digest
// cache (a test never reads or writes the user's): "hash" hashes the
// files the daemon cannot prove by identity, every time.
func AttachProving(t testing.TB, socket string, cfg cacheconfig.Config, policy cacheconfig.Policy) (*client.Attachment, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), AttachTimeout)
	defer cancel()
	return client.Attach(ctx, client.BySocket(socket), cfg, client.Options{ClientName: t.Name(),
		Content: client.ContentOptions{Policy: policy, NoCache: true}})
}

// Plan opens the checkpoint in dir (every safetensors file, one rank) and
// plans it with the default plan options, as a daemon given dir alone
// does. Failures end the test.
func Plan(t testing.TB, dir string) (*safetensors.Checkpoint, *plan.Plan) {
	t.Helper()
	ck, err := plan.OpenCheckpoint(dir, "", plan.ShardRanks{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(ck, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ck, pl
}
