package staging

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	hclog "github.com/hashicorp/go-hclog"

	"golang.org/x/sys/unix"
)

// DefaultSysfsRoot is where sysfs is mounted.
const DefaultSysfsRoot = "/sys"

// SysfsBusID turns a PCI bus id as CUDA or NVML print it ("0000:3B:00.0",
// "00000000:3B:00.0") into sysfs's form ("0000:3b:00.0"). It returns ""
// for a string that is not a bus id.
func SysfsBusID(busID string) string {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(busID)), ":")
	if len(parts) != 3 || len(parts[0]) < 4 || len(parts[1]) != 2 || len(parts[2]) != 4 {
		return ""
	}
	domain := parts[0][len(parts[0])-4:]
	if strings.Trim(parts[0][:len(parts[0])-4], "0") != "" {
		return "" // a domain beyond 16 bits: not one sysfs names this way
	}
	return domain + ":" + parts[1] + ":" + parts[2]
}

// NUMANode returns the NUMA node of the PCI device busID, read from
// ROOT/bus/pci/devices/<busID>/numa_node under root (DefaultSysfsRoot
// when ""). ok is false when the node is unknown: no bus id, no such
// file (not Linux, a container without sysfs), or -1 (a machine with one
// node). A file that exists but cannot be read or parsed is an error.
func NUMANode(root, busID string) (node int, ok bool, err error) {
	if root == "" {
		root = DefaultSysfsRoot
	}
	id := SysfsBusID(busID)
	if id == "" {
		return 0, false, nil
	}
	path := filepath.Join(root, "bus", "pci", "devices", id, "numa_node")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("NUMA node of %s: %w", busID, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false, fmt.Errorf("NUMA node of %s: %s holds %q", busID, path, strings.TrimSpace(string(b)))
	}
	if n < 0 {
		return 0, false, nil
	}
	return n, true, nil
}

// maxNodes bounds the node masks OnNode passes to the kernel.
const maxNodes = 1024

// OnNode runs alloc with the calling thread's memory policy preferring
// node (MPOL_PREFERRED), then restores the thread's previous policy. The
// caller must be locked to its OS thread (runtime.LockOSThread) for the
// policy to apply to alloc. Memory that alloc faults in (the driver
// touches pinned pages while allocating them) is placed on node when the
// node has free memory, elsewhere otherwise. A node outside [0, 1024) or a
// kernel without NUMA policies (ENOSYS, EPERM in some sandboxes) is an
// error and alloc does not run: the caller decides whether to allocate
// unplaced.
func OnNode(node int, alloc func() error) error {
	if node < 0 || node >= maxNodes {
		return fmt.Errorf("NUMA node %d outside [0, %d)", node, maxNodes)
	}
	var oldMode int
	var oldMask [maxNodes / 64]uint64
	if err := getMempolicy(&oldMode, oldMask[:]); err != nil {
		return fmt.Errorf("get_mempolicy: %w", err)
	}
	var mask [maxNodes / 64]uint64
	mask[node/64] = 1 << (node % 64)
	if err := setMempolicy(unix.MPOL_PREFERRED, mask[:]); err != nil {
		return fmt.Errorf("set_mempolicy(MPOL_PREFERRED, node %d): %w", node, err)
	}
	allocErr := alloc()
	if err := setMempolicy(oldMode, oldMask[:]); err != nil {
		return fmt.Errorf("restore the thread's memory policy: %w (allocation: %v)", err, allocErr)
	}
	return allocErr
}

// Mempolicy returns the calling thread's memory policy mode and the first
// 64 nodes of its mask, for tests and diagnostics.
func Mempolicy() (mode int, nodes uint64, err error) {
	var mask [maxNodes / 64]uint64
	err = getMempolicy(&mode, mask[:])
	return mode, mask[0], err
}

func getMempolicy(mode *int, mask []uint64) error {
	var m int32
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&m)),
		uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64), 0, 0, 0)
	if e != 0 {
		return e
	}
	*mode = int(m)
	return nil
}

func setMempolicy(mode int, mask []uint64) error {
	var p uintptr
	n := uintptr(0)
	if mode != unix.MPOL_DEFAULT {
		p, n = uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64)
	}
	_, _, e := unix.Syscall(unix.SYS_SET_MEMPOLICY, uintptr(mode), p, n)
	if e != 0 {
		return e
	}
	return nil
}

// Placer allocates staging memory on a GPU's NUMA node where the kernel
// lets it (OnNode), and anywhere otherwise, warning once.
type Placer struct {
	node     int // -1: unknown, allocate unplaced
	log      hclog.Logger
	unplaced atomic.Bool
}

// NewPlacer returns a Placer for node (-1 when unknown).
func NewPlacer(node int, log hclog.Logger) *Placer {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Placer{node: node, log: log}
}

// Alloc runs alloc preferring the node (on the calling, locked thread);
// when the policy cannot be set it runs alloc unplaced instead.
func (p *Placer) Alloc(alloc func() error) error {
	if p.node < 0 || p.unplaced.Load() {
		return alloc()
	}
	ran := false
	err := OnNode(p.node, func() error {
		ran = true
		return alloc()
	})
	if ran {
		return err
	}
	if p.unplaced.CompareAndSwap(false, true) {
		p.log.Warn("cannot place staging memory on the GPU's NUMA node; allocating it anywhere", "node", p.node, "error", err)
	}
	return alloc()
}

// PlacerFor returns a Placer for the GPU at PCI address busID, reading its
// NUMA node under the sysfs root (see NUMANode), and the node (-1 when
// unknown). A numa_node file that cannot be read is logged, and staging
// memory is then not placed.
func PlacerFor(root, busID string, log hclog.Logger) (*Placer, int) {
	node := -1
	n, ok, err := NUMANode(root, busID)
	switch {
	case err != nil:
		if log != nil {
			log.Warn("NUMA node of the GPU unknown; staging memory is not placed", "error", err)
		}
	case ok:
		node = n
	}
	return NewPlacer(node, log), node
}
