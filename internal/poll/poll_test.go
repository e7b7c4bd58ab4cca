package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestUntilReturnsWhenCondHolds(t *testing.T) {
	calls := 0
	ok, err := Until(context.Background(), time.Minute, func() bool { calls++; return calls == 3 })
	if !ok || err != nil || calls != 3 {
		t.Errorf("Until = %v, %v after %d calls; want true, nil after 3", ok, err, calls)
	}
}

func TestUntilGivesUpAtTheDeadline(t *testing.T) {
	calls := 0
	ok, err := Until(context.Background(), 20*time.Millisecond, func() bool { calls++; return false })
	if ok || err != nil {
		t.Errorf("Until = %v, %v; want false, nil", ok, err)
	}
	if calls < 2 {
		t.Errorf("cond called %d times; want at least once at the start and once at the deadline", calls)
	}
}

func TestUntilStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := Until(ctx, time.Minute, func() bool { return false })
	if ok || !errors.Is(err, context.Canceled) {
		t.Errorf("Until = %v, %v; want false, context.Canceled", ok, err)
	}
}

// fakeT records Fatalf.
type fakeT struct{ failed string }

func (f *fakeT) Helper()                           {}
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestEventually(t *testing.T) {
	var ft fakeT
	Eventually(&ft, time.Minute, "true", func() bool { return true })
	if ft.failed != "" {
		t.Errorf("Eventually failed on a true condition: %s", ft.failed)
	}
	Eventually(&ft, 10*time.Millisecond, "the impossible", func() bool { return false })
	if want := "waiting for the impossible: not true after 10ms"; ft.failed != want {
		t.Errorf("Eventually on a false condition: %q, want %q", ft.failed, want)
	}
}

func TestClosed(t *testing.T) {
	ch := make(chan struct{})
	if Closed(ch) {
		t.Fatal("Closed of an open channel = true")
	}
	close(ch)
	if !Closed(ch) {
		t.Fatal("Closed of a closed channel = false")
	}
}
