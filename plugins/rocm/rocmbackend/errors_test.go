package rocmbackend

import (
	"errors"
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

// watch is the plugin's exit-on-fatal loop over b's runtime.
func watch(b *Backend) gputest.ExitWatch {
	return func(logger hclog.Logger, stop <-chan struct{}, exit func(int)) {
		exitOnFatal(b.Runtime(), logger, stop, exit)
	}
}

// TestFatalErrorExitsThePlugin latches a fatal HIP error (700, the fake's
// sticky file) and checks exitOnFatal logs it and exits with
// ExitStatusFatal (see gputest.CheckFatalErrorExits).
func TestFatalErrorExitsThePlugin(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "fatal")
	b := newBackend(t, fakeConfig(t, fakeOptions{env: map[string]string{"FAKEHIP_STICKY_FILE": trigger}}))
	gputest.CheckFatalErrorExits(t, b, watch(b), trigger, 700, "hipErrorIllegalAddress", ExitStatusFatal)
}

func TestNoExitWithoutFatalError(t *testing.T) {
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	gputest.CheckNoExitWithoutFatalError(t, b, watch(b), fakeMemory)
}

func TestClosedBackendIsUnavailable(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{})
	gputest.CheckClosedIsUnavailable(t, func() (*Backend, error) { return New(cfg, nil) })
}
