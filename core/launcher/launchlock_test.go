package launcher

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/core/paths"
)

// TestLaunchLocksOverlap: a launch holding GPUs a and b makes one over b
// and c fail with ErrLaunchInProgress, and that one leaves c unlocked; once
// released, both are free again.
func TestLaunchLocksOverlap(t *testing.T) {
	dir := t.TempDir()
	tgt := func(uuid string) target {
		return target{uuid: uuid, paths: paths.Paths{DeviceUUID: uuid, Ready: filepath.Join(dir, uuid+".ready.json")}}
	}
	a, b, c := tgt("GPU-a"), tgt("GPU-b"), tgt("GPU-c")
	first, err := lockLaunch([]target{b, a}, LockLaunchFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockLaunch([]target{c, b}, LockLaunchFile); !errors.Is(err, ErrLaunchInProgress) {
		t.Fatalf("overlapping launch = %v, want ErrLaunchInProgress", err)
	}
	onlyC, err := lockLaunch([]target{c}, LockLaunchFile)
	if err != nil {
		t.Fatalf("GPU c after the failed launch: %v (a failed launch must release what it took)", err)
	}
	onlyC.release()
	first.release()
	again, err := lockLaunch([]target{a, b, c}, LockLaunchFile)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.release()
}
