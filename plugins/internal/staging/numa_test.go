package staging

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSysfsBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:3B:00.0":     "0000:3b:00.0",
		"00000000:3B:00.0": "0000:3b:00.0",
		"0001:c1:00.0":     "0001:c1:00.0",
		"00010000:c1:00.0": "",
		"":                 "",
		"3b:00.0":          "",
		"garbage":          "",
	} {
		if got := SysfsBusID(in); got != want {
			t.Errorf("SysfsBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNUMANodeFromSysfs(t *testing.T) {
	root := t.TempDir()
	write := func(id, content string) {
		dir := filepath.Join(root, "bus", "pci", "devices", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("0000:3b:00.0", "1\n")
	write("0000:10:00.0", "-1\n")
	write("0000:20:00.0", "x\n")
	if n, ok, err := NUMANode(root, "00000000:3B:00.0"); n != 1 || !ok || err != nil {
		t.Errorf("node of 3b = %d %v %v, want 1", n, ok, err)
	}
	if _, ok, err := NUMANode(root, "0000:10:00.0"); ok || err != nil {
		t.Errorf("numa_node -1: ok %v err %v, want unknown", ok, err)
	}
	if _, ok, err := NUMANode(root, "0000:99:00.0"); ok || err != nil {
		t.Errorf("absent device: ok %v err %v, want unknown", ok, err)
	}
	if _, ok, err := NUMANode(root, ""); ok || err != nil {
		t.Errorf("no bus id: ok %v err %v, want unknown", ok, err)
	}
	if _, _, err := NUMANode(root, "0000:20:00.0"); err == nil {
		t.Error("a malformed numa_node was accepted")
	}
}

// TestOnNodeSetsAndRestoresThePolicy runs on node 0, which every Linux
// machine has.
func TestOnNodeSetsAndRestoresThePolicy(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, _, err := Mempolicy()
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("no NUMA policies here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var inside int
	var nodes uint64
	err = OnNode(0, func() error {
		var err error
		inside, nodes, err = Mempolicy()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if inside != unix.MPOL_PREFERRED || nodes != 1 {
		t.Errorf("policy inside OnNode(0) = mode %d nodes %b, want MPOL_PREFERRED on node 0", inside, nodes)
	}
	after, _, _ := Mempolicy()
	if after != before {
		t.Errorf("policy after OnNode = %d, want the previous %d", after, before)
	}
	want := errors.New("allocation failed")
	if err := OnNode(0, func() error { return want }); !errors.Is(err, want) {
		t.Errorf("OnNode = %v, want the allocation's error", err)
	}
	if err := OnNode(-1, func() error { t.Fatal("alloc ran"); return nil }); err == nil {
		t.Error("OnNode(-1) succeeded")
	}
}
