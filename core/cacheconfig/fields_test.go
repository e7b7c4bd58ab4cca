package cacheconfig

import (
	"cmp"
	"slices"
	"testing"
)

// TestFieldsAreInNameOrder: fields lists the fixed fields in byte order
// without sorting them (Compare and the digest rely on the order), and
// sorts extra entries in among them.
func TestFieldsAreInNameOrder(t *testing.T) {
	byName := func(a, b field) int { return cmp.Compare(a.name, b.name) }
	for _, c := range []Config{{}, {Model: "m", Extra: map[string]string{"a": "1", "zz": "2", "": "3"}}} {
		fs := c.fields()
		if !slices.IsSortedFunc(fs, byName) {
			t.Errorf("fields of %+v not in name order: %v", c, fs)
		}
		if len(fs) != 19+len(c.Extra) {
			t.Errorf("%d fields, want %d", len(fs), 19+len(c.Extra))
		}
	}
}
