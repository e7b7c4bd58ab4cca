package daemontest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
)

// DefaultUUID is the device of the default backend.
const DefaultUUID = "GPU-0badc0de-0000-4000-8000-000000000001"

// StopTimeout bounds how long the cleanup waits for Run to return.
const StopTimeout = 10 * time.Second

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

	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Start generates a checkpoint, starts a daemon on it (loading it into the
// backend), runs it and registers a cleanup that cancels Run, waits up to
// StopTimeout for it and removes the folder. Failures end the test.
func Start(t testing.TB, opts Options) *Daemon {
	t.Helper()
	// A short folder: Unix socket paths are limited to 107 bytes, and
	// t.TempDir() names can be longer.
	dir, err := os.MkdirTemp("", "wdt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	layout, err := paths.InDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	gen := opts.Checkpoint
	if gen.Shards == 0 {
		gen.Shards = 2
	}
	model, err := safetensorstest.GenerateCheckpoint(filepath.Join(dir, "model"), gen)
	if err != nil {
		t.Fatal(err)
	}
	b := opts.Backend
	if b == nil {
		m, err := mock.NewMemory(mock.MemoryOptions{Dir: filepath.Join(dir, "shm"), DeviceUUIDs: []string{DefaultUUID}})
		if err != nil {
			t.Fatal(err)
		}
		b = m
	}
	o := daemon.Options{Model: model.Dir, Config: cacheconfig.Default(), Layout: layout, DrainTimeout: 2 * time.Second}
	if opts.Edit != nil {
		opts.Edit(&o)
	}
	p := NewPlugin(b)
	d, err := daemon.Start(context.Background(), p, o)
	if err != nil {
		_ = p.Close()
		t.Fatalf("daemontest: start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td := &Daemon{Daemon: d, Plugin: p, Dir: dir, Model: model, cancel: cancel, done: make(chan struct{})}
	go func() {
		td.err = d.Run(ctx)
		close(td.done)
	}()
	t.Cleanup(func() {
		cancel()
		if _, err := td.wait(StopTimeout); err != nil {
			t.Error(err)
		}
	})
	return td
}

// Socket is the daemon's Unix socket.
func (d *Daemon) Socket() string { return d.Info().Paths.Socket }

// Cancel cancels Run's context: the daemon drains and stops.
func (d *Daemon) Cancel() { d.cancel() }

// Done is closed when Run has returned.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Wait waits up to StopTimeout for Run to return and returns its result;
// a daemon still running then ends the test.
func (d *Daemon) Wait(t testing.TB) error {
	t.Helper()
	runErr, err := d.wait(StopTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return runErr
}

func (d *Daemon) wait(within time.Duration) (runErr, err error) {
	select {
	case <-d.done:
		return d.err, nil
	case <-time.After(within):
		return nil, fmt.Errorf("daemontest: daemon did not stop within %v", within)
	}
}

// Attach attaches a client named after the test, with the daemon's own
// config edited by edit (nil: unchanged), within 5 s.
func (d *Daemon) Attach(t testing.TB, edit func(*cacheconfig.Config)) (*client.Attachment, error) {
	t.Helper()
	cfg := d.Info().Config
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return client.Attach(ctx, client.BySocket(d.Socket()), cfg, client.Options{ClientName: t.Name()})
}
