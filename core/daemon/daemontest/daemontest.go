package daemontest

import (
	"context"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// DefaultUUID is the device of the default backend.
const DefaultUUID = testworld.DefaultUUID

// StopTimeout bounds how long the cleanup waits for Run to return.
const StopTimeout = testworld.StopTimeout

// Options configure Start. The zero value serves a generated two-shard
// checkpoint from a one-device sdk/mock.Memory of 1 GiB.
type Options struct {
	// Backend is the device backend. nil: a mock.Memory with DefaultUUID
	// and 1 GiB whose files live in the daemon's folder.
	Backend sdk.Backend
	// Checkpoint tunes the generated checkpoint (default: two shards).
	Checkpoint safetensorstest.GenOptions
	// Edit, when set, edits the daemon's Options before the start: the
	// GPU, the Config, the metrics sink, timeouts. Model and Layout are
	// filled in already.
	Edit func(*daemon.Options)
}

// Daemon is a running in-process daemon.
type Daemon struct {
	*daemon.Daemon
	// Plugin is the backend as the daemon sees it; Crash it to simulate a
	// dying plugin process.
	Plugin *Plugin
	// Dir is the private folder of the socket, ready file, checkpoint and
	// backend files; removed at cleanup.
	Dir string
	// Model is the generated checkpoint.
	Model *safetensorstest.Result

	run *testworld.Running
}

// Start generates a checkpoint, starts a daemon on it (loading it into the
// backend), runs it and registers a cleanup that cancels Run, waits up to
// StopTimeout for it and removes the folder. Failures end the test.
func Start(t testing.TB, opts Options) *Daemon {
	t.Helper()
	w := testworld.New(t, testworld.Options{Checkpoint: opts.Checkpoint})
	b := opts.Backend
	if b == nil {
		m, err := mock.NewMemory(mock.MemoryOptions{Dir: w.Shm, DeviceUUIDs: w.UUIDs})
		if err != nil {
			t.Fatal(err)
		}
		b = m
	}
	o := daemon.Options{Model: w.Model.Dir, Config: cacheconfig.Default(), Layout: w.Layout, DrainTimeout: 2 * time.Second}
	if opts.Edit != nil {
		opts.Edit(&o)
	}
	p := NewPlugin(b)
	d, err := daemon.Start(context.Background(), p, o)
	if err != nil {
		_ = p.Close()
		t.Fatalf("daemontest: start: %v", err)
	}
	return &Daemon{Daemon: d, Plugin: p, Dir: w.Dir, Model: w.Model, run: testworld.Run(t, d)}
}

// Socket is the daemon's Unix socket.
func (d *Daemon) Socket() string { return d.Info().Paths.Socket }

// Cancel cancels Run's context: the daemon drains and stops.
func (d *Daemon) Cancel() { d.run.Cancel() }

// Done is closed when Run has returned.
func (d *Daemon) Done() <-chan struct{} { return d.run.Done() }

// Wait waits up to StopTimeout for Run to return and returns its result;
// a daemon still running then ends the test.
func (d *Daemon) Wait(t testing.TB) error {
	t.Helper()
	return d.run.Wait(t)
}

// Attach attaches a client named after the test, with the daemon's own
// config edited by edit (nil: unchanged), within 5 s.
func (d *Daemon) Attach(t testing.TB, edit func(*cacheconfig.Config)) (*client.Attachment, error) {
	t.Helper()
	return testworld.Attach(t, d.Socket(), d.Info().Config, edit)
}
