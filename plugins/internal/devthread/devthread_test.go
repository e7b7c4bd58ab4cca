package devthread

import (
	"context"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
)

// TestEveryClosureRunsOnTheSetupThread: setup, every job and cleanup see
// one OS thread id, whichever goroutine submitted them.
func TestEveryClosureRunsOnTheSetupThread(t *testing.T) {
	var setupTID, cleanupTID int
	th, err := Start(func() error { setupTID = unix.Gettid(); return nil }, func() error { cleanupTID = unix.Gettid(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			errs <- th.Do(context.Background(), func() error {
				if tid := unix.Gettid(); tid != setupTID {
					return errors.New("job ran on another thread")
				}
				return nil
			})
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := th.Stop(); err != nil || cleanupTID != setupTID {
		t.Fatalf("Stop = %v, cleanup on thread %d, setup on %d", err, cleanupTID, setupTID)
	}
	if err := th.Do(context.Background(), func() error { return nil }); !errors.Is(err, ErrStopped) || !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Do after Stop = %v, want ErrStopped (unavailable)", err)
	}
}

func TestSetupFailureAndCancelledSubmit(t *testing.T) {
	want := errors.New("no context")
	if _, err := Start(func() error { return want }, func() error { t.Error("cleanup ran after a failed setup"); return nil }); !errors.Is(err, want) {
		t.Fatalf("Start = %v, want the setup error", err)
	}
	th, err := Start(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Stop()
	block := make(chan struct{})
	busy := th.Submit(context.Background(), func() error { <-block; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := th.Do(ctx, func() error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Do with a cancelled context while busy = %v (ran %v), want Canceled and no run", err, ran)
	}
	close(block)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
}
