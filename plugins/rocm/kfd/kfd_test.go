package kfd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// writeNode writes a fixture node's properties file.
func writeNode(t *testing.T, root string, id int, props string) {
	t.Helper()
	dir := filepath.Join(root, "class", "kfd", "kfd", "topology", "nodes", itoa(id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "properties"), []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// TestReadPartitionedGPU reads a fixture of a CPU node, one whole GPU and
// a GPU in a two-partition mode (both partitions on one PCI address).
func TestReadPartitionedGPU(t *testing.T) {
	root := t.TempDir()
	writeNode(t, root, 0, "cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\nunique_id 0\n")
	writeNode(t, root, 1, "simd_count 1216\ngfx_target_version 90402\nlocation_id 49408\ndomain 0\nunique_id 1801979520617338022\n")
	writeNode(t, root, 2, "simd_count 304\ngfx_target_version 90402\nlocation_id 8448\ndomain 0\nunique_id 1801979520617338112\n")
	writeNode(t, root, 3, "simd_count 304\ngfx_target_version 90402\nlocation_id 8448\ndomain 0\nunique_id 1801979520617338113\n")
	nodes, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("Read = %+v, want the 3 GPU nodes", nodes)
	}
	n := nodes[0]
	if n.UUID() != "GPU-1901ead3a2ecd4a6" || n.BusID() != "0000:c1:00.0" || n.GfxTarget() != "gfx942" {
		t.Fatalf("node 1 = %s %s %s, want GPU-1901ead3a2ecd4a6 0000:c1:00.0 gfx942", n.UUID(), n.BusID(), n.GfxTarget())
	}
	if nodes[1].UUID() == nodes[2].UUID() || nodes[1].BusID() != nodes[2].BusID() {
		t.Fatalf("partitions: %s/%s and %s/%s, want distinct UUIDs on one address",
			nodes[1].UUID(), nodes[1].BusID(), nodes[2].UUID(), nodes[2].BusID())
	}

	if m, how, ok := Match(nodes, "", "0000:c1:00.0"); !ok || how != "location_id" || m.ID != 1 {
		t.Errorf("Match by the only node at c1 = %+v %q %v", m, how, ok)
	}
	if m, how, ok := Match(nodes, nodes[2].UUID(), "0000:21:00.0"); !ok || how != "unique_id" || m.ID != 3 {
		t.Errorf("Match of the second partition by UUID = %+v %q %v", m, how, ok)
	}
	if _, _, ok := Match(nodes, "GPU-00000000000000ff", "0000:21:00.0"); ok {
		t.Error("a UUID no node has matched a partition by its shared address")
	}
}

func TestReadErrors(t *testing.T) {
	if _, err := Read(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of a tree without KFD = %v, want ErrNotExist", err)
	}
	root := t.TempDir()
	writeNode(t, root, 1, "gfx_target_version 90402\nunique_id zz\n")
	if _, err := Read(root); err == nil {
		t.Error("a malformed properties file was accepted")
	}
}
