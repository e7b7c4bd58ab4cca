// Package kfd reads the AMD kernel driver's compute topology from sysfs
// (ROOT/class/kfd/kfd/topology/nodes/N/properties), the metadata source
// of the ROCm backend when amdsmi is not installed: each GPU node's
// unique_id (its UUID), location_id and domain (its PCI address) and
// gfx_target_version (its gfx target). The sysfs root is a parameter, so
// tests read fixture trees.
//
// A partitioned GPU (MI300X in CPX or DPX compute mode, any NPS memory
// mode) has one node per partition; the partitions share the PCI address
// and are told apart by unique_id, distinct per partition on current ROCm
// (not verified on hardware; the backend refuses duplicates, see
// docs/rocm-backend.md).
package kfd

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/wcache/wcache/plugins/rocm/amdid"
)

// DefaultSysfsRoot is where sysfs is mounted.
const DefaultSysfsRoot = "/sys"

// Node is one GPU node of the topology.
type Node struct {
	ID               int    // the node folder's number
	UniqueID         uint64 // 0: the driver reports none
	Domain           int    // PCI domain
	LocationID       int    // bus<<8 | device<<3 | function
	GfxTargetVersion int    // e.g. 90402
}

// UUID returns the canonical UUID ("GPU-" + 16 hex digits), "" without a
// unique_id.
func (n Node) UUID() string {
	if n.UniqueID == 0 {
		return ""
	}
	return amdid.FromUniqueID(n.UniqueID)
}

// BusID returns the PCI address in sysfs's form, "0000:c1:00.0".
func (n Node) BusID() string {
	l := n.LocationID
	return fmt.Sprintf("%04x:%02x:%02x.%d", n.Domain, (l>>8)&0xff, (l>>3)&0x1f, l&0x7)
}

// GfxTarget returns the gfx target ("gfx942"), "" when unknown.
func (n Node) GfxTarget() string { return amdid.GfxTarget(n.GfxTargetVersion) }

// Read returns the GPU nodes under root (DefaultSysfsRoot when ""), by
// node number; CPU nodes (gfx_target_version 0) are left out. A machine
// without the KFD topology (no amdgpu driver, a container without sysfs)
// is an error wrapping os.ErrNotExist; a properties file that cannot be
// read or parsed is an error naming it.
func Read(root string) ([]Node, error) {
	if root == "" {
		root = DefaultSysfsRoot
	}
	dir := filepath.Join(root, "class", "kfd", "kfd", "topology", "nodes")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("KFD topology: %w", err)
	}
	var out []Node
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		props, err := readProperties(filepath.Join(dir, e.Name(), "properties"))
		if err != nil {
			return nil, err
		}
		n := Node{ID: id, UniqueID: props["unique_id"], Domain: int(props["domain"]),
			LocationID: int(props["location_id"]), GfxTargetVersion: int(props["gfx_target_version"])}
		if n.GfxTargetVersion != 0 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// readProperties parses "name value" lines of unsigned decimal numbers.
func readProperties(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("KFD topology: %w", err)
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("KFD topology: %s: %s is %q, not a number", path, fields[0], fields[1])
		}
		out[fields[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("KFD topology: %s: %w", path, err)
	}
	return out, nil
}

// Match returns the node of a HIP device: the one whose UUID is uuid,
// else the only one at PCI address busID (sysfs form). Nodes sharing the
// address (the partitions of one GPU) are never matched by address, nor
// by position: ok is false then.
func Match(nodes []Node, uuid, busID string) (n Node, how string, ok bool) {
	for _, n := range nodes {
		if uuid != "" && n.UUID() == uuid {
			return n, "unique_id", true
		}
	}
	var found []Node
	for _, n := range nodes {
		if n.BusID() == busID {
			found = append(found, n)
		}
	}
	if len(found) == 1 {
		return found[0], "location_id", true
	}
	return Node{}, "", false
}
