package plan

import (
	"errors"
	"fmt"
)

// ErrEmpty: the checkpoint holds no tensor bytes, so there is nothing to
// allocate or load.
var ErrEmpty = errors.New("checkpoint holds no tensor bytes")

// ErrInvalidOptions: Options are inconsistent (alignment not a power of
// two, arena smaller than one alignment unit, …).
var ErrInvalidOptions = errors.New("invalid plan options")

// TooLargeError: one tensor does not fit in an arena of MaxArenaBytes.
// Tensors are never split across allocations (a client needs each one
// contiguous), so the fix is a larger MaxArenaBytes.
type TooLargeError struct {
	Path          string
	Tensor        string
	Bytes         uint64
	MaxArenaBytes uint64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("tensor %q of %s is %d bytes, larger than the arena limit of %d bytes (raise the maximum arena size)",
		e.Tensor, e.Path, e.Bytes, e.MaxArenaBytes)
}
