package daemonv1

import (
	"errors"
	"fmt"
	"strings"
)

// This file is hand-written beside the generated code: the encoder and
// decoder of TensorTable, shared by the daemon (which encodes) and Go
// clients (which decode).

// ErrBadTensorTable: a TensorTable whose columns do not fit together.
var ErrBadTensorTable = errors.New("malformed tensor table")

// NewTensorTable encodes tensors as a TensorTable. It returns false when a
// tensor has a layout, which a table does not carry: such tensors travel as
// Manifest.tensors.
func NewTensorTable(tensors []*Tensor) (*TensorTable, bool) {
	n := len(tensors)
	t := &TensorTable{NameShared: make([]uint32, n), NameSuffixLen: make([]uint32, n), Dtype: make([]uint32, n),
		Ndim: make([]uint32, n), HandleIndex: make([]uint32, n), Offset: make([]uint64, n), Length: make([]uint64, n)}
	dtypeIndex := map[string]uint32{}
	var suffixes strings.Builder
	prev := ""
	for i, x := range tensors {
		if x.GetLayout() != nil {
			return nil, false
		}
		name := x.GetName()
		shared := 0
		for shared < len(prev) && shared < len(name) && prev[shared] == name[shared] {
			shared++
		}
		t.NameShared[i], t.NameSuffixLen[i] = uint32(shared), uint32(len(name)-shared)
		suffixes.WriteString(name[shared:])
		prev = name
		di, ok := dtypeIndex[x.GetDtype()]
		if !ok {
			di = uint32(len(t.Dtypes))
			dtypeIndex[x.GetDtype()] = di
			t.Dtypes = append(t.Dtypes, x.GetDtype())
		}
		t.Dtype[i] = di
		t.Ndim[i] = uint32(len(x.GetShape()))
		t.Dims = append(t.Dims, x.GetShape()...)
		t.HandleIndex[i], t.Offset[i], t.Length[i] = x.GetHandleIndex(), x.GetOffset(), x.GetLength()
	}
	t.NameSuffixes = []byte(suffixes.String())
	return t, true
}

// TableEntry is one tensor of a decoded TensorTable. Shape shares the
// table's dims: copy it before changing it.
type TableEntry struct {
	Name        string
	Dtype       string
	Shape       []uint64
	HandleIndex uint32
	Offset      uint64
	Length      uint64
}

// Decode expands the table into its tensors, in manifest order (see Each).
func (t *TensorTable) Decode() ([]TableEntry, error) {
	out := make([]TableEntry, 0, len(t.GetNameShared()))
	err := t.Each(func(e TableEntry) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Each calls fn with every tensor of the table, in manifest order, after
// checking that the columns fit together (else an error wrapping
// ErrBadTensorTable, before any call). The names share one allocation. It
// stops at the first error of fn and returns it.
func (t *TensorTable) Each(fn func(TableEntry) error) error {
	n := len(t.GetNameShared())
	if len(t.GetNameSuffixLen()) != n || len(t.GetDtype()) != n || len(t.GetNdim()) != n ||
		len(t.GetHandleIndex()) != n || len(t.GetOffset()) != n || len(t.GetLength()) != n {
		return fmt.Errorf("%w: columns of different lengths", ErrBadTensorTable)
	}
	// Total length of the names, bounded before anything is allocated by
	// it: a name is at most as long as its predecessor plus its suffix.
	var total, prevLen, suffixTotal uint64
	dimsTotal := uint64(0)
	for i := range n {
		shared, suffix := uint64(t.NameShared[i]), uint64(t.NameSuffixLen[i])
		if shared > prevLen {
			return fmt.Errorf("%w: tensor %d shares %d bytes of a %d-byte name", ErrBadTensorTable, i, shared, prevLen)
		}
		prevLen = shared + suffix
		total += prevLen
		suffixTotal += suffix
		dimsTotal += uint64(t.Ndim[i])
		if int(t.Dtype[i]) >= len(t.GetDtypes()) {
			return fmt.Errorf("%w: tensor %d has dtype %d of %d", ErrBadTensorTable, i, t.Dtype[i], len(t.GetDtypes()))
		}
	}
	if suffixTotal != uint64(len(t.GetNameSuffixes())) || dimsTotal != uint64(len(t.GetDims())) {
		return fmt.Errorf("%w: %d suffix bytes and %d dims, the columns say %d and %d",
			ErrBadTensorTable, len(t.GetNameSuffixes()), len(t.GetDims()), suffixTotal, dimsTotal)
	}
	const maxNames = 1 << 30 // a sanity bound: 1M names of 1 KiB
	if total > maxNames {
		return fmt.Errorf("%w: %d bytes of names", ErrBadTensorTable, total)
	}
	// One string of every name, written once: the builder's String shares
	// its buffer, which Grow sized for all of them, so a name's shared
	// prefix is read back from what was written (a byte buffer converted
	// at the end would copy the names a second time).
	var b strings.Builder
	b.Grow(int(total))
	var suffixAt uint64
	prevStart := 0
	for i := range n {
		start := b.Len()
		b.WriteString(b.String()[prevStart : prevStart+int(t.NameShared[i])])
		end := suffixAt + uint64(t.NameSuffixLen[i])
		b.Write(t.NameSuffixes[suffixAt:end])
		suffixAt, prevStart = end, start
	}
	names := b.String()
	var at, dimsAt uint64
	for i := range n {
		l := uint64(t.NameShared[i]) + uint64(t.NameSuffixLen[i])
		nd := uint64(t.Ndim[i])
		e := TableEntry{Name: names[at : at+l], Dtype: t.Dtypes[t.Dtype[i]], HandleIndex: t.HandleIndex[i],
			Offset: t.Offset[i], Length: t.Length[i]}
		if nd > 0 { // a scalar's shape is nil, as in a decoded Tensor
			e.Shape = t.Dims[dimsAt : dimsAt+nd : dimsAt+nd]
		}
		at += l
		dimsAt += nd
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}
