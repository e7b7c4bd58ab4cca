package safetensors

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinel errors, one per rule. Every violation found by this package is a
// *FormatError whose Err is one of these, so errors.Is(err, ErrX) works on
// anything this package returns. The names follow the Rust reference's
// SafeTensorError variants where one exists.
var (
	// ErrHeaderTooSmall: the file is shorter than the 8-byte length prefix.
	ErrHeaderTooSmall = errors.New("header too small")
	// ErrHeaderTooLarge: the header length N exceeds MaxHeaderSize.
	ErrHeaderTooLarge = errors.New("header too large")
	// ErrInvalidHeaderLength: 8+N overflows or runs past the end of the file.
	ErrInvalidHeaderLength = errors.New("invalid header length")
	// ErrInvalidHeader: the header is not valid UTF-8, does not start with
	// '{', is not a JSON object, or a field has the wrong JSON type (a
	// negative, fractional or quoted shape element, data_offsets that are
	// not exactly two integers, a non-string metadata value, …).
	ErrInvalidHeader = errors.New("invalid header")
	// ErrDuplicateName: a JSON object in the header repeats a key (two
	// tensors with one name, a field given twice), or two files of one
	// checkpoint hold a tensor of the same name.
	ErrDuplicateName = errors.New("duplicate name")
	// ErrUnknownDType: a tensor's dtype is not one of DTypes().
	ErrUnknownDType = errors.New("unknown dtype")
	// ErrInvalidOffset: tensors, sorted by offset, do not start at 0 and
	// follow each other back to back (overlap, alias, hole, END < BEGIN).
	ErrInvalidOffset = errors.New("invalid offset")
	// ErrOverflow: the element count or bit count of a shape overflows u64.
	ErrOverflow = errors.New("size arithmetic overflow")
	// ErrMisaligned: a tensor's bit count is not a whole number of bytes.
	ErrMisaligned = errors.New("misaligned slice")
	// ErrTensorInvalidInfo: END−BEGIN differs from dtype × shape bytes.
	ErrTensorInvalidInfo = errors.New("tensor byte range does not match dtype and shape")
	// ErrIncompleteBuffer: the data buffer is not exactly as long as the
	// last tensor's END (missing or trailing bytes).
	ErrIncompleteBuffer = errors.New("data buffer does not match the file size")

	// ErrInvalidIndex: model.safetensors.index.json is malformed or names a
	// shard that is not a plain file name.
	ErrInvalidIndex = errors.New("invalid checkpoint index")
	// ErrMissingTensor: the index maps a weight to a shard that lacks it.
	ErrMissingTensor = errors.New("tensor missing from its shard")
	// ErrMisplacedTensor: a shard holds a tensor that the index maps to
	// another shard.
	ErrMisplacedTensor = errors.New("tensor mapped to another shard")
	// ErrNoFiles: a checkpoint has no safetensors file.
	ErrNoFiles = errors.New("no safetensors files")
	// ErrDuplicateFile: two files of one checkpoint share a base name.
	ErrDuplicateFile = errors.New("duplicate file name")
)

// FormatError reports a violated rule. Path is the file (empty when the
// caller parsed a bare io.ReaderAt), Tensor the tensor or key concerned
// (empty when the rule is about the whole file), Rule a human description
// with the offending values, and Err the sentinel of the rule.
type FormatError struct {
	Path   string
	Rule   string
	Tensor string
	Err    error
}

// Error formats as `safetensors: <path>: tensor "<name>": <rule> (<sentinel>)`,
// leaving out the parts that are empty.
func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		b.WriteString("tensor ")
		b.WriteString(strconv.Quote(e.Tensor))
		b.WriteString(": ")
	}
	b.WriteString(e.Rule)
	if e.Err != nil {
		b.WriteString(" (")
		b.WriteString(e.Err.Error())
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the rule's sentinel.
func (e *FormatError) Unwrap() error { return e.Err }

// formatErr builds a *FormatError without a path; Open and the checkpoint
// functions fill Path in.
func formatErr(sentinel error, tensor, rule string) *FormatError {
	return &FormatError{Rule: rule, Tensor: tensor, Err: sentinel}
}
