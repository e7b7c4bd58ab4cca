package fatal

import (
	"errors"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
)

func TestLatchKeepsTheFirstError(t *testing.T) {
	var l Latch
	done := l.Done()
	if l.Err() != nil {
		t.Fatal("a fresh latch holds an error")
	}
	first, second := errors.New("700"), errors.New("719")
	l.Set(nil)
	l.Set(first)
	l.Set(second)
	select {
	case <-done:
	default:
		t.Fatal("Done not closed after Set")
	}
	if l.Err() != first {
		t.Fatalf("Err = %v, want the first error", l.Err())
	}
}

func TestExitOn(t *testing.T) {
	var l Latch
	exited := make(chan int, 1)
	go ExitOn(l.Done(), l.Err, hclog.NewNullLogger(), "fatal", nil, func(c int) { exited <- c })
	select {
	case <-exited:
		t.Fatal("exit before any error")
	case <-time.After(20 * time.Millisecond):
	}
	l.Set(errors.New("boom"))
	if c := <-exited; c != sdk.ExitFatal {
		t.Fatalf("exit(%d), want %d", c, sdk.ExitFatal)
	}
	stop := make(chan struct{})
	close(stop)
	var quiet Latch
	ExitOn(quiet.Done(), quiet.Err, hclog.NewNullLogger(), "fatal", stop, func(int) { t.Error("exit after stop") })
}
