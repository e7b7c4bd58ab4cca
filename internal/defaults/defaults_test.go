package defaults

import (
	"testing"
	"time"
)

func TestPositiveReplacesZeroAndNegativeOnly(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, time.Second},
		{-time.Millisecond, time.Second},
		{time.Nanosecond, time.Nanosecond},
		{time.Hour, time.Hour},
	} {
		got := c.in
		Positive(&got, time.Second)
		if got != c.want {
			t.Errorf("Positive(%v, 1s) = %v, want %v", c.in, got, c.want)
		}
	}
	var u uint64
	Positive(&u, 7)
	if u != 7 {
		t.Errorf("Positive(uint64 0, 7) = %d, want 7", u)
	}
}

func TestZeroReplacesTheZeroValueOnly(t *testing.T) {
	for _, c := range []struct{ in, want int }{
		{0, 4},
		{-1, -1},
		{3, 3},
	} {
		got := c.in
		Zero(&got, 4)
		if got != c.want {
			t.Errorf("Zero(%d, 4) = %d, want %d", c.in, got, c.want)
		}
	}
	s := ""
	Zero(&s, "auto")
	if s != "auto" {
		t.Errorf(`Zero("", "auto") = %q, want "auto"`, s)
	}
}
