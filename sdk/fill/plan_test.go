package fill

import (
	"math/rand/v2"
	"testing"
)

// checkPlan asserts every property Load relies on.
func checkPlan(t *testing.T, offset, length, dest uint64, bufSize, align int, chunks []Chunk) {
	t.Helper()
	pos := offset
	for i, c := range chunks {
		if c.Len <= 0 {
			t.Fatalf("chunk %d has Len %d", i, c.Len)
		}
		if c.ReadOffset+uint64(c.Skip) != pos {
			t.Fatalf("chunk %d starts at file byte %d, want %d", i, c.ReadOffset+uint64(c.Skip), pos)
		}
		if c.Dest != dest+(pos-offset) {
			t.Fatalf("chunk %d Dest %d, want %d", i, c.Dest, dest+(pos-offset))
		}
		if c.Skip < 0 || c.Skip >= align {
			t.Fatalf("chunk %d Skip %d outside [0,%d)", i, c.Skip, align)
		}
		if i > 0 && c.Skip != 0 {
			t.Fatalf("chunk %d after the first skips %d bytes", i, c.Skip)
		}
		if c.Skip+c.Len > c.ReadLen || c.ReadLen > bufSize {
			t.Fatalf("chunk %d: Skip %d + Len %d > ReadLen %d or ReadLen > buffer %d", i, c.Skip, c.Len, c.ReadLen, bufSize)
		}
		if c.ReadOffset%uint64(align) != 0 || c.ReadLen%align != 0 {
			t.Fatalf("chunk %d read [%d,+%d) not %d-aligned", i, c.ReadOffset, c.ReadLen, align)
		}
		pos += uint64(c.Len)
	}
	if pos != offset+length {
		t.Fatalf("chunks cover up to %d, want %d", pos, offset+length)
	}
}

func TestPlanRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		align := []int{1, Alignment}[r.IntN(2)]
		bufSize := align * (1 + r.IntN(8))
		if align == 1 {
			bufSize = 1 + r.IntN(40000)
		}
		offset := r.Uint64N(1 << 20)
		length := r.Uint64N(200000)
		dest := r.Uint64N(1 << 30)
		chunks := Plan(offset, length, dest, bufSize, align)
		if length == 0 && chunks != nil {
			t.Fatal("Plan of 0 bytes returned chunks")
		}
		checkPlan(t, offset, length, dest, bufSize, align, chunks)
	}
}

func TestPlanExamples(t *testing.T) {
	// Unaligned head and tail, buffer of two blocks.
	got := Plan(5000, 10000, 7, 8192, Alignment)
	want := []Chunk{
		{ReadOffset: 4096, ReadLen: 8192, Skip: 904, Len: 7288, Dest: 7},
		{ReadOffset: 12288, ReadLen: 4096, Skip: 0, Len: 2712, Dest: 7 + 7288},
	}
	if len(got) != len(want) {
		t.Fatalf("Plan = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("chunk %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// Exact reads for buffered files.
	got = Plan(3, 10, 0, 4, 1)
	if len(got) != 3 || got[0] != (Chunk{ReadOffset: 3, ReadLen: 4, Len: 4}) || got[2] != (Chunk{ReadOffset: 11, ReadLen: 2, Len: 2, Dest: 8}) {
		t.Fatalf("buffered Plan = %+v", got)
	}
}

func TestPlanRejectsBadBuffer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Plan with a buffer that is not a multiple of the alignment did not panic")
		}
	}()
	Plan(0, 10, 0, 5000, Alignment)
}
