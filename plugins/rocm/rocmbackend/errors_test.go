package rocmbackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
)

func TestMissingLibraryOrSymbolIsUnavailable(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{})
	cfg.Library = filepath.Join(t.TempDir(), "libamdhip64.so.7")
	_, err := New(cfg, nil)
	var le *dl.LoadError
	if !errors.As(err, &le) || !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "backend unavailable: cannot load "+cfg.Library) {
		t.Errorf("missing library: %v", err)
	}
	cfg = fakeConfig(t, fakeOptions{variant: "noipcopen"})
	_, err = New(cfg, nil)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "missing symbol hipIpcOpenMemHandle") {
		t.Errorf("missing symbol: %v", err)
	}
	_, err = New(fakeConfig(t, fakeOptions{env: map[string]string{"FAKEHIP_INIT_ERROR": "100"}}), nil)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "hipInit") {
		t.Errorf("hipInit failing: %v", err)
	}
}

func TestOutOfMemoryThenFreeMakesRoom(t *testing.T) {
	gputest.CheckOutOfMemoryThenFree(t, newBackend(t, fakeConfig(t, fakeOptions{})), fakeMemory, "hipErrorOutOfMemory")
}

// TestFatalErrorExitsThePlugin latches a fatal HIP error (the fake's
// sticky file) and checks exitOnFatal logs it and exits with
// ExitStatusFatal; without one it does not exit.
func TestFatalErrorExitsThePlugin(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "fatal")
	b := newBackend(t, fakeConfig(t, fakeOptions{env: map[string]string{"FAKEHIP_STICKY_FILE": trigger}}))
	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	stop := make(chan struct{})
	go exitOnFatal(b.Runtime(), hclog.NewNullLogger(), stop, func(code int) { exited <- code })
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = b.Read(ctx, id, 0, 1)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "hipErrorIllegalAddress") {
		t.Fatalf("Read after the fault = %v, want hipErrorIllegalAddress", err)
	}
	if code := <-exited; code != ExitStatusFatal {
		t.Fatalf("exit(%d), want %d", code, ExitStatusFatal)
	}
	close(stop)
}

func TestNoExitWithoutFatalError(t *testing.T) {
	quiet := newBackend(t, fakeConfig(t, fakeOptions{}))
	stop2 := make(chan struct{})
	returned := make(chan struct{})
	go func() {
		exitOnFatal(quiet.Runtime(), hclog.NewNullLogger(), stop2, func(int) { t.Error("exit called without a fatal error") })
		close(returned)
	}()
	close(stop2)
	<-returned
}

func TestClosedBackendIsUnavailable(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{})
	gputest.CheckClosedIsUnavailable(t, func() (*Backend, error) { return New(cfg, nil) })
}
