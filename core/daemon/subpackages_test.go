package daemon

import (
	"testing"

	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/core/daemon/handover"
)

// TestSubpackagesSpellTheDaemonsStatus: fill picks sibling candidates, and
// handover checks the daemon it takes over, by the states and source a
// daemon's Status spells, which are this package's own.
func TestSubpackagesSpellTheDaemonsStatus(t *testing.T) {
	for _, c := range []struct{ what, theirs, ours string }{
		{"fill.StateServing", fill.StateServing, StateServing.String()},
		{"fill.SourceFiles", fill.SourceFiles, SourceFiles},
		{"handover.StateServing", handover.StateServing, StateServing.String()},
		{"handover.StateEmpty", handover.StateEmpty, StateEmpty.String()},
	} {
		if c.theirs != c.ours {
			t.Errorf("%s is %q; the daemon spells it %q", c.what, c.theirs, c.ours)
		}
	}
}
