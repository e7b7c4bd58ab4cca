// Package idtable is a Backend's table of allocation ids: the ids one
// sdk.Backend handed out, over memory objects a runtime may share between
// Backends (and count references to). The CUDA and ROCm backends use it.
package idtable

import (
	"sync"

	"github.com/wcache/wcache/sdk"
)

// Table maps ids to memory objects. Its zero value is not usable; create
// it with New. It is safe for concurrent use.
type Table[M any] struct {
	closedErr error
	mu        sync.Mutex
	closed    bool
	next      sdk.AllocationID
	items     map[sdk.AllocationID]M
}

// New returns an empty table whose calls after Close fail with closedErr.
func New[M any](closedErr error) *Table[M] {
	return &Table[M]{closedErr: closedErr, items: map[sdk.AllocationID]M{}}
}

// Add registers m under a new id (ids start at 1).
func (t *Table[M]) Add(m M) (sdk.AllocationID, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, t.closedErr
	}
	t.next++
	t.items[t.next] = m
	return t.next, nil
}

// Hold returns the object of id after acquire (called under the table's
// lock, so that a concurrent Remove cannot slip in) took a reference;
// acquire returning false is the closed error. An unknown id is
// ErrNoSuchAllocation.
func (t *Table[M]) Hold(id sdk.AllocationID, acquire func(M) bool) (M, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, err := t.get(id, "allocation %d")
	if err == nil && !acquire(m) {
		var zero M
		return zero, t.closedErr
	}
	return m, err
}

// Remove deletes id and returns its object; an unknown id is
// ErrNoSuchAllocation.
func (t *Table[M]) Remove(id sdk.AllocationID) (M, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, err := t.get(id, "free allocation %d")
	if err == nil {
		delete(t.items, id)
	}
	return m, err
}

// get returns the object of id, under t.mu: the closed error after Close,
// ErrNoSuchAllocation (with what, a format of the id) for an unknown id.
func (t *Table[M]) get(id sdk.AllocationID, what string) (M, error) {
	var zero M
	if t.closed {
		return zero, t.closedErr
	}
	m, ok := t.items[id]
	if !ok {
		return zero, sdk.Errorf(sdk.ErrNoSuchAllocation, what, id)
	}
	return m, nil
}

// Close empties the table and returns what it held; first reports whether
// this was the first Close (later ones return nothing).
func (t *Table[M]) Close() (held []M, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	t.closed = true
	for _, m := range t.items {
		held = append(held, m)
	}
	clear(t.items)
	return held, true
}

// Closed reports whether Close was called.
func (t *Table[M]) Closed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}
