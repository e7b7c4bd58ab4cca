package cacheconfig_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/wcache/wcache/core/cacheconfig"
)

func TestBoundDiffsSmallIsUnchanged(t *testing.T) {
	in := []cacheconfig.FieldDiff{{Field: "tp_size", Daemon: "1", Client: "2"}, {Field: "extra.x", DaemonAbsent: true}}
	kept, omitted := cacheconfig.BoundDiffs(in)
	if omitted != 0 || len(kept) != 2 || kept[0] != in[0] || kept[1] != in[1] {
		t.Fatalf("BoundDiffs = %v, %d", kept, omitted)
	}
}

func TestBoundDiffsCutsValuesAndCountsTheRest(t *testing.T) {
	var in []cacheconfig.FieldDiff
	long := strings.Repeat("é", 1000) // 2 bytes per rune: a cut must not split one
	for i := range 100 {
		in = append(in, cacheconfig.FieldDiff{Field: fmt.Sprintf("extra.k%03d", i), Daemon: long, ClientAbsent: true})
	}
	kept, omitted := cacheconfig.BoundDiffs(in)
	if len(kept) == 0 || omitted == 0 || len(kept)+omitted != len(in) {
		t.Fatalf("kept %d, omitted %d of %d", len(kept), omitted, len(in))
	}
	total := 0
	for i, d := range kept {
		if d.Field != in[i].Field || !d.Truncated || !d.ClientAbsent || len(d.Daemon) > cacheconfig.MaxDiffValueBytes ||
			!utf8.ValidString(d.Daemon) || !strings.HasPrefix(long, d.Daemon) {
			t.Fatalf("kept[%d] = %+v", i, d)
		}
		total += len(d.Field) + len(d.Daemon) + len(d.Client)
	}
	if total > cacheconfig.MaxMismatchBytes {
		t.Fatalf("kept diffs hold %d bytes, more than %d", total, cacheconfig.MaxMismatchBytes)
	}
	// A single huge diff is still sent, cut.
	kept, omitted = cacheconfig.BoundDiffs([]cacheconfig.FieldDiff{{Field: strings.Repeat("f", 5000), Daemon: "1", Client: "2"}})
	if omitted != 0 || len(kept) != 1 || len(kept[0].Field) != cacheconfig.MaxDiffValueBytes || !kept[0].Truncated {
		t.Fatalf("one huge diff: %+v, %d", kept, omitted)
	}
}
