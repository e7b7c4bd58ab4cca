package cudabackend

import (
	"path/filepath"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/gputest"
)

// watch is the plugin's exit-on-fatal loop over b's runtime.
func watch(b *Backend) gputest.ExitWatch {
	return func(logger hclog.Logger, stop <-chan struct{}, exit func(int)) {
		exitOnFatal(b.Runtime(), logger, stop, exit)
	}
}

// TestStickyErrorExitsThePlugin latches a sticky CUDA error (719, the
// fake's sticky file) and checks exitOnFatal logs it and exits with
// ExitStatusSticky (see gputest.CheckFatalErrorExits).
func TestStickyErrorExitsThePlugin(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "sticky")
	b := newBackend(t, fakeConfig(t, fakeOptions{env: map[string]string{"FAKECUDA_STICKY_FILE": trigger}}))
	gputest.CheckFatalErrorExits(t, b, watch(b), trigger, 719, "CUDA_ERROR_LAUNCH_FAILED", ExitStatusSticky)
	if err := b.Runtime().FatalError(); err == nil {
		t.Fatal("FatalError = nil after a sticky error")
	}
}

func TestNoExitWithoutStickyError(t *testing.T) {
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	gputest.CheckNoExitWithoutFatalError(t, b, watch(b), fakeMemory)
}
