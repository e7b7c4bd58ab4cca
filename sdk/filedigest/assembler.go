package filedigest

import (
	"slices"
	"sync"
)

// Leaf is the digest of one leaf of a file.
type Leaf struct {
	Index int64
	Sum   Sum
}

// FileLeaves are the leaves of one file that a fill hashed.
type FileLeaves struct {
	// Algorithm is the leaves' hash ("" is SHA256Tree: a plugin built
	// before algorithms had names sends none).
	Algorithm Algorithm
	Path      string
	// Size is the file's size when the fill opened it.
	Size   int64
	Leaves []Leaf
}

// Assembler collects the leaves of one file of Size bytes from pieces
// written in any order, by any number of goroutines. A leaf that one Write
// covers whole is hashed at once, without a copy; a leaf that arrives in
// pieces (a chunk boundary, two tensors either side of it) is copied into a
// leaf-sized buffer until every byte of it has arrived, then hashed. Leaves
// no Write covered completely (the header's, those at the edge of what this
// fill read) are missing from Leaves: the caller completes them (Complete).
type Assembler struct {
	alg  Algorithm
	size int64

	mu      sync.Mutex
	done    map[int64]Sum
	partial map[int64]*partialLeaf
}

// partialLeaf is a leaf that arrived in pieces so far.
type partialLeaf struct {
	buf    []byte
	ranges [][2]int64 // covered [from, to) within the leaf, disjoint
	got    int64
	bad    bool // two pieces overlapped: never reported
}

// NewAssembler returns an Assembler of Default leaves for a file of size
// bytes.
func NewAssembler(size int64) *Assembler { return Default.NewAssembler(size) }

// NewAssembler returns an Assembler of a's leaves for a file of size bytes.
func (a Algorithm) NewAssembler(size int64) *Assembler {
	return &Assembler{alg: a, size: size, done: map[int64]Sum{}, partial: map[int64]*partialLeaf{}}
}

// Algorithm is the algorithm of the leaves a collects.
func (a *Assembler) Algorithm() Algorithm { return a.alg }

// Write records p, the file's bytes at offset off. Bytes past the file's
// size are ignored.
func (a *Assembler) Write(off int64, p []byte) {
	end := min(off+int64(len(p)), a.size)
	for pos := off; pos < end; {
		i := pos / LeafBytes
		lo, n := LeafRange(a.size, i)
		hi := min(lo+n, end)
		piece := p[pos-off : hi-off]
		if pos == lo && hi == lo+n {
			sum := a.alg.Leaf(piece)
			a.mu.Lock()
			a.done[i] = sum
			a.mu.Unlock()
		} else {
			a.addPiece(i, n, pos-lo, piece)
		}
		pos = hi
	}
}

// addPiece copies a piece of leaf i (n bytes long) at offset within it.
func (a *Assembler) addPiece(i, n, within int64, piece []byte) {
	a.mu.Lock()
	pl := a.partial[i]
	if pl == nil {
		pl = &partialLeaf{buf: make([]byte, n)}
		a.partial[i] = pl
	}
	from, to := within, within+int64(len(piece))
	for _, r := range pl.ranges {
		if from < r[1] && r[0] < to {
			pl.bad = true
		}
	}
	pl.ranges = append(pl.ranges, [2]int64{from, to})
	a.mu.Unlock()
	// Registered pieces are disjoint (or the leaf is bad), so copies into
	// one buffer never overlap.
	copy(pl.buf[from:to], piece)
	a.mu.Lock()
	pl.got += to - from
	// Only the writer whose copy completed the leaf sees got == n: every
	// other copy into it happened before its writer's increment.
	complete := !pl.bad && pl.got == n
	if complete {
		delete(a.partial, i)
	}
	a.mu.Unlock()
	if !complete {
		return
	}
	sum := a.alg.Leaf(pl.buf)
	a.mu.Lock()
	a.done[i] = sum
	a.mu.Unlock()
}

// Leaves returns the leaves hashed so far, by index.
func (a *Assembler) Leaves() []Leaf {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Leaf, 0, len(a.done))
	for i, s := range a.done {
		out = append(out, Leaf{Index: i, Sum: s})
	}
	slices.SortFunc(out, func(x, y Leaf) int { return int(x.Index - y.Index) })
	return out
}
