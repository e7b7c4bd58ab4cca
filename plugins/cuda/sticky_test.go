package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/cuda/cudabackend"
	"github.com/wcache/wcache/plugins/cuda/internal/fakelib"
	"github.com/wcache/wcache/sdk"
)

// TestStickyErrorEndsThePluginWithTheReason: after a sticky CUDA error the
// plugin exits, and the host's exit error (what the daemon logs and stops
// with) carries the CUDA error.
func TestStickyErrorEndsThePluginWithTheReason(t *testing.T) {
	if fakelib.Real(os.Getenv) {
		t.Skip("needs the fake driver's fault injection")
	}
	trigger := filepath.Join(t.TempDir(), "sticky")
	p := start(t, pluginEnv(t, "", "FAKECUDA_STICKY_FILE="+trigger))
	b := p.Backend()
	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, id, 0, 16); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Read after the fault = %v, want ErrUnavailable", err)
	}
	select {
	case <-p.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin still runs 20 s after a sticky error")
	}
	msg := p.ExitError().Error()
	for _, want := range []string{"exit status " + string(rune('0'+cudabackend.ExitStatusSticky)), "sticky error", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("exit error %q lacks %q", msg, want)
		}
	}
}
