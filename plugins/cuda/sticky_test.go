package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/poll"
)

// TestStickyErrorEndsThePlugin: after a sticky CUDA error the plugin
// reports ErrUnavailable and exits, so every later call fails. (That the
// host's exit error carries the CUDA error is the daemon's plugin-exit path,
// covered by core/pluginhost's crash tests.)
func TestStickyErrorEndsThePlugin(t *testing.T) {
	if fakelib.Real(os.Getenv) {
		t.Skip("needs the fake driver's fault injection")
	}
	trigger := filepath.Join(t.TempDir(), "sticky")
	b := start(t, pluginEnv(t, "", "FAKECUDA_STICKY_FILE="+trigger))
	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, id, 0, 16); !errors.Is(err, sdk.ErrUnavailable) {
		// Either the plugin's answer (naming error 700) or, when it exits
		// before answering, the lost connection: both are ErrUnavailable.
		t.Fatalf("Read after the fault = %v, want ErrUnavailable", err)
	}
	poll.Eventually(t, 20*time.Second, "the plugin to stop answering after a sticky error", func() bool {
		_, err := b.Info(ctx)
		return err != nil
	})
}
