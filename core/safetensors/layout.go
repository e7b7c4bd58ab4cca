package safetensors

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// validateLayout sorts tensors by offset and checks, as the reference's
// Metadata::validate does, that they tile the data buffer: the first starts
// at 0, each starts where the previous one ended (no overlap, alias or hole),
// END−BEGIN equals the dtype × shape byte count (checked arithmetic), and the
// buffer ends exactly at the end of the file (no trailing bytes).
func validateLayout(tensors []TensorInfo, n uint64, fileSize int64) error {
	slices.SortFunc(tensors, func(a, b TensorInfo) int {
		if c := cmp.Compare(a.Begin, b.Begin); c != 0 {
			return c
		}
		if c := cmp.Compare(a.End, b.End); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	var end uint64
	for i, t := range tensors {
		if t.Begin != end || t.End < t.Begin {
			rule := fmt.Sprintf("data_offsets [%d, %d] must start at %d, where the previous tensor ends", t.Begin, t.End, end)
			switch {
			case i == 0:
				rule = fmt.Sprintf("data_offsets [%d, %d]: the first tensor must start at 0", t.Begin, t.End)
			case t.End < t.Begin:
				rule = fmt.Sprintf("data_offsets [%d, %d] end before they begin", t.Begin, t.End)
			case t.Begin < end:
				rule = fmt.Sprintf("data_offsets [%d, %d] overlap the previous tensor %q, which ends at %d", t.Begin, t.End, tensors[i-1].Name, end)
			case t.Begin > end:
				rule = fmt.Sprintf("data_offsets [%d, %d] leave a hole after the previous tensor %q, which ends at %d", t.Begin, t.End, tensors[i-1].Name, end)
			}
			return formatErr(ErrInvalidOffset, t.Name, rule)
		}
		size, detail, sentinel := byteSize(t.DType, t.Shape)
		if sentinel != nil {
			return formatErr(sentinel, t.Name, detail)
		}
		if got := t.End - t.Begin; got != size {
			return formatErr(ErrTensorInvalidInfo, t.Name,
				fmt.Sprintf("data_offsets [%d, %d] span %d bytes but %s %s needs %d", t.Begin, t.End, got, t.DType, shapeString(t.Shape), size))
		}
		end = t.End
	}
	total, carry := bits.Add64(end, prefixSize+n, 0)
	if carry != 0 || total != uint64(fileSize) {
		rule := fmt.Sprintf("tensors end at file offset %d+%d+%d but the file is %d bytes", prefixSize, n, end, fileSize)
		if carry == 0 && total > uint64(fileSize) {
			rule += fmt.Sprintf(" (%d bytes short: %s)", total-uint64(fileSize), truncatedHint)
		}
		return formatErr(ErrIncompleteBuffer, "", rule)
	}
	return nil
}

// truncatedHint ends the rule of a file shorter than its header says: the
// usual cause is a download or copy that stopped early.
const truncatedHint = "an incomplete download or copy? fetch the file again"
