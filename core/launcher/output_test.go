package launcher

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/wcache/wcache/internal/childproc"
)

func TestChildOutputPrefixesWholeLines(t *testing.T) {
	var out bytes.Buffer
	o := newChildOutput("[gpu 0 tp 0 pp 0] ", newLockedWriter(&out), 3)
	for _, chunk := range []string{"hel", "lo\nwor", "ld\r\n", "\n", "tail without newline"} {
		if n, err := o.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got := out.String(); got != "[gpu 0 tp 0 pp 0] hello\n[gpu 0 tp 0 pp 0] world\n[gpu 0 tp 0 pp 0] \n" {
		t.Fatalf("output %q", got)
	}
	o.Flush()
	if !strings.HasSuffix(out.String(), "[gpu 0 tp 0 pp 0] tail without newline\n") {
		t.Fatalf("Flush did not emit the partial line: %q", out.String())
	}
	if got, want := o.Tail(), []string{"world", "", "tail without newline"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Tail = %q, want %q", got, want)
	}
}

func TestChildOutputRingKeepsLastLines(t *testing.T) {
	o := newChildOutput("", newLockedWriter(nil), 4)
	for i := 0; i < 11; i++ {
		fmt.Fprintf(o, "line %d\n", i)
	}
	if got, want := o.Tail(), []string{"line 7", "line 8", "line 9", "line 10"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Tail = %q, want %q", got, want)
	}
}

func TestChildOutputCutsLongLines(t *testing.T) {
	var out bytes.Buffer
	o := newChildOutput("> ", newLockedWriter(&out), 2)
	long := strings.Repeat("x", 3*maxLineBytes)
	o.Write([]byte(long[:maxLineBytes]))
	o.Write([]byte(long[maxLineBytes:] + "\nnext\n"))
	tail := o.Tail()
	if len(tail) != 2 || len(tail[0]) > maxLineBytes+20 || !strings.HasSuffix(tail[0], "(cut)") || tail[1] != "next" {
		t.Fatalf("Tail = %d lines, first %d bytes", len(tail), len(tail[0]))
	}
}

// Lines written concurrently by several children never interleave.
func TestChildOutputsDoNotInterleave(t *testing.T) {
	var out childproc.Buffer
	shared := newLockedWriter(&out)
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		o := newChildOutput(fmt.Sprintf("[%d] ", c), shared, 1)
		wg.Go(func() {
			for i := 0; i < 200; i++ {
				o.Write([]byte("abc"))
				o.Write([]byte("def\n"))
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines", len(lines))
	}
	for _, l := range lines {
		if len(l) != len("[0] abcdef") || !strings.HasSuffix(l, "] abcdef") {
			t.Fatalf("interleaved line %q", l)
		}
	}
}
