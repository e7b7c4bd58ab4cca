package idtable

import (
	"errors"
	"testing"

	"github.com/wcache/wcache/sdk"
)

func TestTable(t *testing.T) {
	closed := errors.New("closed")
	tb := New[string](closed)
	a, _ := tb.Add("a")
	b, _ := tb.Add("b")
	if a == b || a == 0 {
		t.Fatalf("ids %d %d", a, b)
	}
	if m, err := tb.Hold(a, func(string) bool { return true }); m != "a" || err != nil {
		t.Fatalf("Hold = %q %v", m, err)
	}
	if _, err := tb.Hold(a, func(string) bool { return false }); !errors.Is(err, closed) {
		t.Fatalf("Hold of memory gone = %v, want the closed error", err)
	}
	if _, err := tb.Remove(a); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Remove(a); !errors.Is(err, sdk.ErrNoSuchAllocation) {
		t.Fatalf("second Remove = %v", err)
	}
	held, first := tb.Close()
	if !first || len(held) != 1 || held[0] != "b" {
		t.Fatalf("Close = %v %v", held, first)
	}
	if _, again := tb.Close(); again || !tb.Closed() {
		t.Fatal("second Close reported first")
	}
	if _, err := tb.Add("c"); !errors.Is(err, closed) {
		t.Fatalf("Add after Close = %v", err)
	}
}
