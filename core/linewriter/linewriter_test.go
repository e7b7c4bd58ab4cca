package linewriter_test

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/wcache/wcache/core/linewriter"
)

type line struct {
	text string
	cut  bool
}

func collect() (*[]line, linewriter.LineFunc) {
	var got []line
	return &got, func(s string, cut bool) { got = append(got, line{s, cut}) }
}

func TestAnySplitGivesTheSameLines(t *testing.T) {
	stream := "first\r\nsecond\n\nthird without newline"
	want := []line{{"first", false}, {"second", false}, {"", false}, {"third without newline", false}}
	for size := 1; size <= len(stream); size++ {
		got, emit := collect()
		w := linewriter.New(0, emit)
		for i := 0; i < len(stream); i += size {
			if n, err := w.Write([]byte(stream[i:min(i+size, len(stream))])); err != nil || n != min(size, len(stream)-i) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if p, cut := w.Partial(); p != "third without newline" || cut {
			t.Fatalf("split %d: Partial = %q, %v", size, p, cut)
		}
		w.Flush()
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("split %d: lines %+v, want %+v", size, *got, want)
		}
		w.Flush() // nothing pending: no line
		if len(*got) != len(want) {
			t.Fatalf("a second Flush emitted %+v", (*got)[len(want):])
		}
	}
}

func TestLongLinesAreCut(t *testing.T) {
	got, emit := collect()
	w := linewriter.New(8, emit)
	w.Write([]byte("0123456789"))
	w.Write([]byte("abc\nshort\n" + strings.Repeat("z", 20)))
	w.Flush()
	want := []line{{"01234567", true}, {"short", false}, {"zzzzzzzz", true}}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("lines %+v, want %+v", *got, want)
	}
}

func TestConcurrentWritesKeepLinesWhole(t *testing.T) {
	var mu sync.Mutex
	count := map[string]int{}
	w := linewriter.New(0, func(s string, _ bool) {
		mu.Lock()
		count[s]++
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				w.Write([]byte("line-" + string(rune('a'+g)) + "\n"))
			}
		}()
	}
	wg.Wait()
	for g := range 8 {
		if n := count["line-"+string(rune('a'+g))]; n != 100 {
			t.Errorf("line-%c seen %d times, want 100", 'a'+g, n)
		}
	}
	if len(count) != 8 {
		t.Errorf("lines seen: %v", count)
	}
}
