package daemon

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testplugin"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk/names"
)

// mappedBytes maps the manifest of a and returns tensor name → bytes
// (copied, so that they can be compared after a.Lease ends).
func mappedBytes(t *testing.T, a *client.Attachment) map[string][]byte {
	t.Helper()
	ts, err := client.Map(a.Manifest)
	if err != nil {
		t.Fatalf("map: %v", err)
	}
	defer ts.Close()
	out := map[string][]byte{}
	for _, mt := range ts.All() {
		out[mt.Name] = bytes.Clone(mt.Data)
	}
	return out
}

// TestPluginCrashWithDescriptorHandlesIsSurvived: the daemon holds the
// memfds, so when its plugin dies (its own descriptors and mappings gone)
// a new plugin imports them: the lease stays, the same generation is
// served with the same bytes, nothing is loaded again, and Status counts
// the restart.
func TestPluginCrashWithDescriptorHandlesIsSurvived(t *testing.T) {
	f := newFixture(t)
	f.memfd = true
	var restarted []*testplugin.Plugin
	r := f.start(0, func(o *Options) {
		o.RestartPlugin = func(context.Context) (Plugin, error) {
			p := f.plugin(nil)
			restarted = append(restarted, p)
			return p, nil
		}
	})
	a := r.mustAttach(t)
	if a.Manifest.Handles[0].Kind != names.KindMemfd {
		t.Fatalf("handle kind %q, want memfd", a.Manifest.Handles[0].Kind)
	}
	want := mappedBytes(t, a)
	before := r.d.statusProto()

	// The plugin process dies: its memfds and mappings go with it.
	if err := r.p.Die("signal: killed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin restart", func() bool { return r.d.statusProto().GetStartPhases().GetPluginRestarts() == 1 })
	select {
	case <-a.Lease.Done():
		t.Fatalf("the lease ended with the plugin: %v", a.Lease.Err())
	case <-r.Done():
		t.Fatalf("the daemon stopped: %v", r.Err())
	default:
	}
	after := r.d.statusProto()
	if after.GetGeneration() != before.GetGeneration() || after.GetStartPhases().GetLoadNs() != before.GetStartPhases().GetLoadNs() ||
		len(restarted) != 1 {
		t.Fatalf("after the restart: generation %d (was %d), load %d ns (was %d), %d plugins started",
			after.GetGeneration(), before.GetGeneration(), after.GetStartPhases().GetLoadNs(), before.GetStartPhases().GetLoadNs(), len(restarted))
	}
	b := r.mustAttach(t)
	got := mappedBytes(t, b)
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Fatalf("tensor %s differs after the restart", name)
		}
	}
	// The new plugin holds the allocations: a verify through it passes.
	if _, err := client.Verify(context.Background(), b.Manifest, safetensorstest.Open(t, f.model.Dir),
		client.VerifyOptions{Importer: restarted[0].Backend()}); err != nil {
		t.Errorf("verify after the restart: %v", err)
	}
}

// TestPluginCrashWithNameHandlesStaysFatal: with posix-shm the memory was
// the plugin's; RestartPlugin is not called and Run ends with
// ErrPluginExited (invariant 8).
func TestPluginCrashWithNameHandlesStaysFatal(t *testing.T) {
	f := newFixture(t)
	called := false
	r := f.start(0, func(o *Options) {
		o.RestartPlugin = func(context.Context) (Plugin, error) { called = true; return f.plugin(nil), nil }
	})
	a := r.mustAttach(t)
	r.p.Crash("signal: killed")
	if err := r.Wait(t); !errors.Is(err, ErrPluginExited) {
		t.Fatalf("Run = %v, want ErrPluginExited", err)
	}
	<-a.Lease.Done()
	if called {
		t.Error("a new plugin was started for name handles")
	}
}

// TestPluginCrashLoopBacksOffAndGivesUp: a plugin that dies again right
// after every restart is replaced at most MaxPluginRestarts times (each
// after a longer back-off), and then the daemon gives up as for a fatal
// plugin exit instead of restarting it forever.
func TestPluginCrashLoopBacksOffAndGivesUp(t *testing.T) {
	f := newFixture(t)
	f.memfd = true
	var mu sync.Mutex
	var started []*testplugin.Plugin
	r := f.start(0, func(o *Options) {
		o.RestartBackoff = time.Millisecond
		o.RestartPlugin = func(context.Context) (Plugin, error) {
			p := f.plugin(nil)
			mu.Lock()
			started = append(started, p)
			mu.Unlock()
			return p, nil
		}
	})
	// Each plugin dies once it has taken over (a crash loop).
	current := r.p
	for i := 0; ; i++ {
		if err := current.Die("signal: segmentation fault"); err != nil {
			t.Fatal(err)
		}
		if i == MaxPluginRestarts {
			break
		}
		waitFor(t, "the plugin restart", func() bool { return r.d.statusProto().GetStartPhases().GetPluginRestarts() == uint32(i+1) })
		mu.Lock()
		current = started[len(started)-1]
		mu.Unlock()
	}
	if err := r.Wait(t); !errors.Is(err, ErrPluginExited) {
		t.Fatalf("Run: %v, want ErrPluginExited after a crash loop", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(started) != MaxPluginRestarts {
		t.Fatalf("%d plugins started, want %d before giving up", len(started), MaxPluginRestarts)
	}
}

// TestRestartBackoffDoubles: the waits before the restarts of a crash
// loop: none for the first, then base, doubling, at most MaxRestartBackoff.
func TestRestartBackoffDoubles(t *testing.T) {
	base := 200 * time.Millisecond
	want := []time.Duration{0, base, 2 * base, 4 * base, 8 * base}
	for n, w := range want {
		if got := restartBackoff(n, base); got != w {
			t.Errorf("restartBackoff(%d) = %s, want %s", n, got, w)
		}
	}
	if got := restartBackoff(40, base); got != MaxRestartBackoff {
		t.Errorf("restartBackoff(40) = %s, want the cap %s", got, MaxRestartBackoff)
	}
}
