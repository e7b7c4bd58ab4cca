// Package tensorview checks how a tensor views the bytes of its storage:
// its dtype against the vocabulary both sides of the protocol speak, and
// its shape, strides and storage offset against the storage's size. The
// daemon checks a publish's table with it before anything is allocated;
// the Go client checks a manifest with it before it builds a view (the
// Python client applies the same rules, wcache.manifest).
package tensorview

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"

	"github.com/wcache/wcache/core/safetensors"
)

// MaxDTypeLen bounds a dtype string (the longest of the vocabulary is 18
// bytes).
const MaxDTypeLen = 32

// TorchPrefix starts a published dtype that has no safetensors spelling:
// "torch.<name>", e.g. "torch.quint8" (the Python client's spelling).
const TorchPrefix = "torch."

// torchBits are the torch dtypes without a safetensors spelling that a
// publish may name after TorchPrefix, with the bits of one element as
// torch stores it (element_size × 8; sub-byte and packed types take a
// byte per element).
var torchBits = map[string]uint64{
	"complex32": 32, "complex128": 128,
	"qint8": 8, "quint8": 8, "qint32": 32, "quint4x2": 8, "quint2x4": 8,
	"bits1x8": 8, "bits2x4": 8, "bits4x2": 8, "bits8": 8, "bits16": 16,
	"uint1": 8, "uint2": 8, "uint3": 8, "uint4": 8, "uint5": 8, "uint6": 8, "uint7": 8,
	"int1": 8, "int2": 8, "int3": 8, "int4": 8, "int5": 8, "int6": 8, "int7": 8,
	"float4_e2m1fn_x2": 8,
}

// ErrInvalidView is wrapped by every error of this package.
var ErrInvalidView = errors.New("invalid tensor view")

// ElementBits returns the bits of one element of dtype, a safetensors dtype
// ("BF16", "F8_E4M3", "F4", …) or TorchPrefix + one of the torch dtypes
// safetensors lacks; ok is false for any other string.
func ElementBits(dtype string) (uint64, bool) {
	if name, ok := strings.CutPrefix(dtype, TorchPrefix); ok {
		b, ok := torchBits[name]
		return b, ok
	}
	d := safetensors.DType(dtype)
	if !d.Valid() {
		return 0, false
	}
	return uint64(d.Bits()), true
}

// CheckDType refuses a dtype outside the vocabulary (ElementBits), naming
// it (shortened when long) and the rule.
func CheckDType(dtype string) error {
	if _, ok := ElementBits(dtype); ok {
		return nil
	}
	shown := dtype
	if len(shown) > MaxDTypeLen {
		shown = shown[:MaxDTypeLen] + "…"
	}
	return fmt.Errorf("dtype %q (%d bytes) is neither a safetensors dtype (BF16, F16, F32, F8_E4M3, …) nor %s<a torch dtype safetensors lacks> (torch.quint8, torch.complex128, …): %w",
		shown, len(dtype), TorchPrefix, ErrInvalidView)
}

// View is how a tensor views its storage: Strides and StorageOffset in
// elements; nil Strides is row-major contiguous.
type View struct {
	DType         string
	Shape         []uint64
	Strides       []int64
	StorageOffset uint64
}

// Check returns nil when every element v reaches lies inside a storage of
// storageBytes bytes. Refused (ErrInvalidView): a dtype outside the
// vocabulary, strides of another rank than the shape, a negative stride,
// and sizes whose arithmetic overflows 64 bits. A tensor
// with a zero dimension reaches no element.
func (v View) Check(storageBytes uint64) error {
	elemBits, ok := ElementBits(v.DType)
	if !ok {
		return CheckDType(v.DType)
	}
	if v.Strides != nil && len(v.Strides) != len(v.Shape) {
		return fmt.Errorf("%d strides for %d dimensions: %w", len(v.Strides), len(v.Shape), ErrInvalidView)
	}
	// Built only when returned: Check runs once per tensor of every attach's
	// manifest (100,000 at a time), where formatting an unused error cost
	// more than the whole check.
	overflow := func() error {
		return fmt.Errorf("shape %v, strides %v, offset %d overflow 64 bits: %w", v.Shape, v.Strides, v.StorageOffset, ErrInvalidView)
	}
	// last: the highest element index the view reaches; count: elements.
	last, count := v.StorageOffset, uint64(1)
	rowMajor := uint64(1)
	empty := false
	for i := len(v.Shape) - 1; i >= 0; i-- {
		n := v.Shape[i]
		stride := rowMajor
		if v.Strides != nil {
			if v.Strides[i] < 0 {
				return fmt.Errorf("stride %d of dimension %d is negative: %w", v.Strides[i], i, ErrInvalidView)
			}
			stride = uint64(v.Strides[i])
		}
		hi, c := bits.Mul64(count, n)
		if hi != 0 {
			return overflow()
		}
		count = c
		if n == 0 {
			empty = true
			continue
		}
		hi, step := bits.Mul64(n-1, stride)
		if hi != 0 {
			return overflow()
		}
		var carry uint64
		if last, carry = bits.Add64(last, step, 0); carry != 0 {
			return overflow()
		}
		if hi, rowMajor = bits.Mul64(rowMajor, n); hi != 0 && v.Strides == nil {
			return overflow()
		}
	}
	if empty {
		return nil
	}
	// Bits up to the end of the last element, against the storage's bits.
	if last == math.MaxUint64 {
		return overflow()
	}
	hi, endBits := bits.Mul64(last+1, elemBits)
	if hi != 0 {
		return overflow()
	}
	if hi, storageBits := bits.Mul64(storageBytes, 8); hi == 0 && endBits > storageBits {
		return fmt.Errorf("%s %v with strides %v at storage offset %d reaches byte %d of a %d-byte storage: %w",
			v.DType, v.Shape, v.Strides, v.StorageOffset, (endBits+7)/8, storageBytes, ErrInvalidView)
	}
	return nil
}
