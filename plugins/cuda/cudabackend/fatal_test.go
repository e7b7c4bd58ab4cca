package cudabackend

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
)

func TestStickyErrorExitsThePlugin(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "sticky")
	b := newBackend(t, fakeConfig(t, fakeOptions{env: map[string]string{"FAKECUDA_STICKY_FILE": trigger}}))
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs})
	exited := make(chan int, 1)
	go exitOnFatal(b.Runtime(), logger, make(chan struct{}), func(code int) { exited <- code })

	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, []byte("719"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, id, 0, 16); !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "CUDA_ERROR_LAUNCH_FAILED") {
		t.Fatalf("Read after a sticky error = %v, want ErrUnavailable naming CUDA_ERROR_LAUNCH_FAILED", err)
	}
	select {
	case code := <-exited:
		if code != ExitStatusSticky {
			t.Fatalf("exit(%d), want %d", code, ExitStatusSticky)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not exit after a sticky error")
	}
	if !strings.Contains(logs.String(), "sticky") || !strings.Contains(logs.String(), "CUDA_ERROR_LAUNCH_FAILED (719)") {
		t.Fatalf("log %q does not give the reason", logs.String())
	}
	if err := b.Runtime().FatalError(); err == nil {
		t.Fatal("FatalError = nil after a sticky error")
	}
}

func TestNoExitWithoutStickyError(t *testing.T) {
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		exitOnFatal(b.Runtime(), hclog.NewNullLogger(), stop, func(int) { t.Error("exit called") })
		close(done)
	}()
	if _, _, err := b.Allocate(context.Background(), 0, 300<<20); !errors.Is(err, sdk.ErrOutOfMemory) {
		t.Fatalf("Allocate beyond memory = %v, want ErrOutOfMemory (not sticky)", err)
	}
	close(stop)
	<-done
}
