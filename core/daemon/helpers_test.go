package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testplugin"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/sdk/poll"
)

// fixture is one test's world: a short private directory, a layout inside
// it, a generated checkpoint and a mock backend of two devices.
type fixture struct {
	t      testing.TB
	dir    string
	layout paths.Layout
	model  *safetensorstest.Result
	shm    string
	uuids  []string
	// memfd makes plugin's backends export memfd descriptor handles.
	memfd bool
	// fillStats makes plugin's backends return the fill's counters and
	// content-digest leaves (mock.Wrap alone drops them).
	fillStats bool
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir, err := os.MkdirTemp("", "wd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	layout, err := paths.InDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	model, err := safetensorstest.GenerateCheckpoint(filepath.Join(dir, "model"), safetensorstest.GenOptions{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, dir: dir, layout: layout, model: model, shm: filepath.Join(dir, "shm"),
		uuids: []string{"GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"}}
}

// plugin returns a plugin over an sdk/mock.Memory of the fixture's
// devices (1 GiB each, files in f.shm); inject, when set, replaces some of
// its calls (to make them fail).
func (f *fixture) plugin(inject func(*mock.Backend)) *testplugin.Plugin {
	f.t.Helper()
	mem, err := mock.NewMemory(mock.MemoryOptions{DeviceUUIDs: f.uuids, Memory: 1 << 30, Dir: f.shm, Memfd: f.memfd})
	if err != nil {
		f.t.Fatal(err)
	}
	b := mock.Wrap(mem)
	if f.fillStats {
		b.LoadFunc, b.LoadStatsFunc = nil, mem.LoadWithStats
	}
	if inject != nil {
		inject(b)
	}
	return testplugin.New(b, mem)
}

func (f *fixture) options(gpu int) Options {
	return Options{GPU: gpu, Model: f.model.Dir, Config: cacheconfig.Default(), Layout: f.layout,
		DrainTimeout: 2 * time.Second}
}

// running is a daemon whose Run goroutine the test watches.
type running struct {
	d      *Daemon
	p      *testplugin.Plugin
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, once done is closed
}

// start starts a daemon on gpu with options edited by edit and runs it.
func (f *fixture) start(gpu int, edit func(*Options)) *running {
	f.t.Helper()
	return f.startOn(gpu, f.plugin(nil), edit)
}

// startWith starts a daemon on GPU 0 over plugin p and runs it.
func (f *fixture) startWith(p *testplugin.Plugin, edit func(*Options)) *running {
	f.t.Helper()
	return f.startOn(0, p, edit)
}

// startOn starts a daemon on gpu over p with options edited by edit and
// runs it.
func (f *fixture) startOn(gpu int, p *testplugin.Plugin, edit func(*Options)) *running {
	f.t.Helper()
	o := f.options(gpu)
	if edit != nil {
		edit(&o)
	}
	d, err := Start(context.Background(), p, o)
	if err != nil {
		f.t.Fatalf("start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, p: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = d.Run(ctx)
		close(r.done)
	}()
	f.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			f.t.Error("daemon did not stop")
		}
	})
	return r
}

// wait waits for Run to return.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not stop within 10s")
		return nil
	}
}

// attach attaches to the daemon of r with its own config.
func (r *running) attach(t *testing.T, edit func(*cacheconfig.Config)) (*client.Attachment, error) {
	t.Helper()
	cfg := r.d.Info().Config
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return client.Attach(ctx, client.BySocket(r.d.Info().Paths.Socket), cfg, client.Options{ClientName: t.Name()})
}

func (r *running) mustAttach(t *testing.T) *client.Attachment {
	t.Helper()
	a, err := r.attach(t, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() { a.Lease.Close() })
	return a
}

// dial connects a client to r.
func (r *running) dial(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.BySocket(r.d.Info().Paths.Socket), client.Options{})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, 5*time.Second, what, cond)
}

func assertGone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", p, err)
		}
	}
}

func mustTemplate(t *testing.T, text string) paths.Template {
	t.Helper()
	tmpl, err := paths.ParseTemplate("test", text)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// safetensorsGenerate writes a pre-sharded checkpoint of tp ranks.
func safetensorsGenerate(dir string, tp int) (*safetensorstest.Result, error) {
	return safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{TPSize: tp, Shards: 2})
}
