package safetensors

import "fmt"

// DType is a safetensors element type, spelled as in the header ("BF16").
type DType string

// The dtypes of the reference implementation, in its enum order (which is
// also increasing alignment order, used by writers to order tensors).
const (
	BOOL       DType = "BOOL"
	F4         DType = "F4"
	F6E2M3     DType = "F6_E2M3"
	F6E3M2     DType = "F6_E3M2"
	U8         DType = "U8"
	I8         DType = "I8"
	F8E5M2     DType = "F8_E5M2"
	F8E4M3     DType = "F8_E4M3"
	F8E8M0     DType = "F8_E8M0"
	F8E4M3FNUZ DType = "F8_E4M3FNUZ"
	F8E5M2FNUZ DType = "F8_E5M2FNUZ"
	I16        DType = "I16"
	U16        DType = "U16"
	F16        DType = "F16"
	BF16       DType = "BF16"
	I32        DType = "I32"
	U32        DType = "U32"
	F32        DType = "F32"
	C64        DType = "C64"
	F64        DType = "F64"
	I64        DType = "I64"
	U64        DType = "U64"
)

// dtypeInfo is the bit size and enum rank of a dtype.
type dtypeInfo struct {
	bits int
	rank int
}

// dtypeTable returns the information of d, and false when d is unknown.
// A switch rather than a package-level map keeps the table immutable.
func dtypeTable(d DType) (dtypeInfo, bool) {
	switch d {
	case BOOL:
		return dtypeInfo{8, 0}, true
	case F4:
		return dtypeInfo{4, 1}, true
	case F6E2M3:
		return dtypeInfo{6, 2}, true
	case F6E3M2:
		return dtypeInfo{6, 3}, true
	case U8:
		return dtypeInfo{8, 4}, true
	case I8:
		return dtypeInfo{8, 5}, true
	case F8E5M2:
		return dtypeInfo{8, 6}, true
	case F8E4M3:
		return dtypeInfo{8, 7}, true
	case F8E8M0:
		return dtypeInfo{8, 8}, true
	case F8E4M3FNUZ:
		return dtypeInfo{8, 9}, true
	case F8E5M2FNUZ:
		return dtypeInfo{8, 10}, true
	case I16:
		return dtypeInfo{16, 11}, true
	case U16:
		return dtypeInfo{16, 12}, true
	case F16:
		return dtypeInfo{16, 13}, true
	case BF16:
		return dtypeInfo{16, 14}, true
	case I32:
		return dtypeInfo{32, 15}, true
	case U32:
		return dtypeInfo{32, 16}, true
	case F32:
		return dtypeInfo{32, 17}, true
	case C64:
		return dtypeInfo{64, 18}, true
	case F64:
		return dtypeInfo{64, 19}, true
	case I64:
		return dtypeInfo{64, 20}, true
	case U64:
		return dtypeInfo{64, 21}, true
	}
	return dtypeInfo{}, false
}

// DTypes returns every known dtype in the reference enum order.
func DTypes() []DType {
	return []DType{BOOL, F4, F6E2M3, F6E3M2, U8, I8, F8E5M2, F8E4M3, F8E8M0,
		F8E4M3FNUZ, F8E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64}
}

// ParseDType returns s as a DType. Matching is exact (case-sensitive), as in
// the reference; an unknown name is an error wrapping ErrUnknownDType.
func ParseDType(s string) (DType, error) {
	if _, ok := dtypeTable(DType(s)); !ok {
		return "", fmt.Errorf("dtype %q: %w", s, ErrUnknownDType)
	}
	return DType(s), nil
}

// Bits is the size of one element in bits (4 for F4, 6 for the F6 types, 64
// for C64). It is 0 for an unknown dtype.
func (d DType) Bits() int {
	info, _ := dtypeTable(d)
	return info.bits
}

// Rank is the position of d in the reference enum (BOOL is 0, U64 is 21),
// which writers use to order tensors by decreasing alignment. It is -1 for an
// unknown dtype.
func (d DType) Rank() int {
	info, ok := dtypeTable(d)
	if !ok {
		return -1
	}
	return info.rank
}

// Valid reports whether d is a known dtype.
func (d DType) Valid() bool {
	_, ok := dtypeTable(d)
	return ok
}

// String returns the dtype's header spelling.
func (d DType) String() string { return string(d) }
