package gputest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
)

// ExitWatch is a plugin's exit-on-fatal loop over one backend's runtime
// (FatalRuntime.ExitOnFatal): it logs the first fatal error to logger and
// calls exit with the plugin's status, or returns when stop is closed
// first.
type ExitWatch func(logger hclog.Logger, stop <-chan struct{}, exit func(int))

// FatalRuntime is a vendor runtime's fatal-error side (the CUDA and ROCm
// Runtime): its exit-on-fatal loop (an ExitWatch) and the fatal error it
// latched, nil before one.
type FatalRuntime interface {
	ExitOnFatal(logger hclog.Logger, stop <-chan struct{}, exit func(int))
	FatalError() error
}

// CheckFatalErrorExits latches code in the fake driver (by writing it to
// trigger, the file its sticky-error variable names; b must read that
// variable) after an allocation, and checks that the next Read fails with
// ErrUnavailable naming the error (name), that watch calls exit(status)
// and that its log gives the reason, "<name> (<code>)".
func CheckFatalErrorExits(t *testing.T, b sdk.Backend, watch ExitWatch, trigger string, code int, name string, status int) {
	t.Helper()
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs})
	exited := make(chan int, 1)
	stop := make(chan struct{})
	defer close(stop)
	go watch(logger, stop, func(code int) { exited <- code })

	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, []byte(fmt.Sprint(code)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, id, 0, 16); !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), name) {
		t.Fatalf("Read after a fatal error = %v, want ErrUnavailable naming %s", err, name)
	}
	select {
	case got := <-exited:
		if got != status {
			t.Fatalf("exit(%d), want %d", got, status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not exit after a fatal error")
	}
	if reason := fmt.Sprintf("%s (%d)", name, code); !strings.Contains(logs.String(), reason) {
		t.Fatalf("log %q does not give the reason %q", logs.String(), reason)
	}
}

// CheckNoExitWithoutFatalError runs watch while b refuses an allocation
// past its capacity (ErrOutOfMemory, not fatal) and checks that it
// returns, once stopped, without calling exit.
func CheckNoExitWithoutFatalError(t *testing.T, b sdk.Backend, watch ExitWatch, capacity uint64) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		watch(hclog.NewNullLogger(), stop, func(int) { t.Error("exit called without a fatal error") })
		close(done)
	}()
	if _, _, err := b.Allocate(context.Background(), 0, capacity+4<<20); !errors.Is(err, sdk.ErrOutOfMemory) {
		t.Fatalf("Allocate beyond memory = %v, want ErrOutOfMemory (not fatal)", err)
	}
	close(stop)
	<-done
}
