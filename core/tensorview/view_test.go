package tensorview

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	big := uint64(1) << 40
	cases := []struct {
		name    string
		v       View
		storage uint64
		ok      bool
	}{
		{"contiguous fits", View{DType: "F32", Shape: []uint64{4}}, 16, true},
		{"contiguous one past", View{DType: "F32", Shape: []uint64{5}}, 16, false},
		{"3200-byte view over 16 bytes", View{DType: "F32", Shape: []uint64{800}, Strides: []int64{1}}, 16, false},
		{"transposed fits", View{DType: "BF16", Shape: []uint64{3, 2}, Strides: []int64{1, 3}}, 12, true},
		{"storage offset past the end", View{DType: "U8", Shape: []uint64{2}, Strides: []int64{1}, StorageOffset: 15}, 16, false},
		{"storage offset fits", View{DType: "U8", Shape: []uint64{2}, Strides: []int64{1}, StorageOffset: 14}, 16, true},
		{"negative stride", View{DType: "F32", Shape: []uint64{4}, Strides: []int64{-1}}, 16, false},
		{"rank mismatch", View{DType: "F32", Shape: []uint64{4}, Strides: []int64{1, 1}}, 16, false},
		{"element count overflows", View{DType: "F32", Shape: []uint64{big, big}, Strides: []int64{1 << 40, 1}}, math.MaxUint64, false},
		{"offset overflows", View{DType: "F32", Shape: []uint64{2}, Strides: []int64{math.MaxInt64}, StorageOffset: math.MaxUint64 - 1}, math.MaxUint64, false},
		{"empty dimension reaches nothing", View{DType: "F32", Shape: []uint64{0, 1 << 50}}, 0, true},
		{"torch dtype of the vocabulary", View{DType: "torch.complex128", Shape: []uint64{1}}, 16, true},
		{"torch dtype too large", View{DType: "torch.complex128", Shape: []uint64{200}}, 16, false},
		{"torch dtype outside the vocabulary", View{DType: "torch.float32", Shape: []uint64{1}}, 16, false},
		{"misspelt dtype", View{DType: "bflaot16", Shape: []uint64{1}}, 16, false},
		{"sub-byte dtype", View{DType: "F4", Shape: []uint64{32}}, 16, true},
		{"sub-byte dtype one past", View{DType: "F4", Shape: []uint64{33}}, 16, false},
		{"scalar", View{DType: "F64", Shape: nil}, 8, true},
	}
	for _, c := range cases {
		err := c.v.Check(c.storage)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidView) {
			t.Errorf("%s: %v does not match ErrInvalidView", c.name, err)
		}
	}
}

func TestCheckDTypeBoundsWhatItEchoes(t *testing.T) {
	err := CheckDType(strings.Repeat("x", 1<<20))
	if err == nil || len(err.Error()) > 400 {
		t.Fatalf("a 1 MiB dtype: %d-byte error %v", len(err.Error()), err != nil)
	}
}
