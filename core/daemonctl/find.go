// Package daemonctl acts on the daemons of one user's path layout as an
// operator does: find them through their ready files, report what each
// holds, stop one and wait for its process to exit, evict one. The wcache
// CLI's status, stop, evict and cleanup commands are thin layers over it;
// an engine that only attaches needs core/client alone.
package daemonctl

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/wcache/wcache/core/paths"
)

// Found is a daemon (or what a dead one left) found under a layout: the
// device UUID its files name, and their paths.
type Found struct {
	UUID  string
	Paths paths.Paths
}

// Find returns the daemons whose ready files exist under layout, by UUID.
// A file whose name the layout does not derive is skipped; a malformed
// glob is an error.
func Find(layout paths.Layout) ([]Found, error) {
	return findByGlob(layout, layout.ReadyGlob(), "")
}

// FindWithLocks is Find plus the devices that left only a lock file
// behind (what cleanup may remove), each once: Find's daemons first, then
// the lock files' devices, each list by UUID.
func FindWithLocks(layout paths.Layout) ([]Found, error) {
	ready, err := Find(layout)
	if err != nil {
		return nil, err
	}
	locks, err := findByGlob(layout, layout.ReadyGlob(), paths.LockSuffix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Found
	for _, f := range append(ready, locks...) {
		if !seen[f.UUID] {
			seen[f.UUID] = true
			out = append(out, f)
		}
	}
	return out, nil
}

// findByGlob matches pattern and keeps the files that are ready files of
// the layout once suffix is removed.
func findByGlob(layout paths.Layout, pattern, suffix string) ([]Found, error) {
	matches, err := filepath.Glob(pattern + suffix)
	if err != nil {
		return nil, fmt.Errorf("list ready files %s: %w", pattern, err)
	}
	var out []Found
	for _, m := range matches {
		uuid, ok := layout.ReadyUUID(strings.TrimSuffix(m, suffix))
		if !ok {
			continue
		}
		p, err := layout.Derive(uuid)
		if err != nil {
			continue
		}
		out = append(out, Found{UUID: uuid, Paths: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
	return out, nil
}
