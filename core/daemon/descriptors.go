package daemon

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/sdk"
)

// handleFiles are the descriptors of one generation's descriptor handles
// (memfd, cuda-vmm-fd), by handle index (nil for a name handle). The daemon
// holds them for as long as it holds the generation: the memory then does
// not depend on the plugin process (invariant 8), a restarted plugin or a
// successor daemon imports them, and clients receive them on the
// descriptor channel.
type handleFiles struct {
	// own are the descriptors Export returned (writable).
	own []*os.File
	// client are what a lease receives: a memfd reopened read-only through
	// /proc/self/fd (a client can then neither write to the weights nor map
	// them writable), the own descriptor for other kinds, and for a memfd
	// where /proc is not mounted.
	client []*os.File
	sizes  []uint64
}

// newHandleFiles takes over the Files of handles; nil when none has one.
func newHandleFiles(handles []sdk.Handle) *handleFiles {
	any := false
	for _, h := range handles {
		any = any || h.File != nil
	}
	if !any {
		return nil
	}
	hf := &handleFiles{own: make([]*os.File, len(handles)), client: make([]*os.File, len(handles)), sizes: make([]uint64, len(handles))}
	for i, h := range handles {
		hf.own[i], hf.client[i], hf.sizes[i] = h.File, h.File, h.Size
		if h.File == nil || h.Kind != sdk.HandleMemfd {
			continue
		}
		if ro, err := reopenReadOnly(h.File); err == nil {
			hf.client[i] = ro
		}
	}
	return hf
}

// reopenReadOnly opens a new read-only file description of f's file.
func reopenReadOnly(f *os.File) (*os.File, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen descriptor %d read-only: %w", f.Fd(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()+" (read-only)"), nil
}

// descriptors lists the client (or, writable, the own) descriptors with
// their handle index and size, in handle order. A nil receiver has none.
func (hf *handleFiles) descriptors(writable bool) []fdchannel.Descriptor {
	if hf == nil {
		return nil
	}
	files := hf.client
	if writable {
		files = hf.own
	}
	var out []fdchannel.Descriptor
	for i, f := range files {
		if f != nil {
			out = append(out, fdchannel.Descriptor{Handle: uint32(i), Size: hf.sizes[i], File: f})
		}
	}
	return out
}

// close closes every descriptor; the memory goes when the last other holder
// (a client's descriptor or mapping) goes. A nil receiver is a no-op.
func (hf *handleFiles) close() {
	if hf == nil {
		return
	}
	for i := range hf.own {
		if hf.client[i] != nil && hf.client[i] != hf.own[i] {
			_ = hf.client[i].Close()
		}
		if hf.own[i] != nil {
			_ = hf.own[i].Close()
		}
	}
	hf.own, hf.client = nil, nil
}

// closeHandleFiles closes the Files of handles that no manifest took over.
func closeHandleFiles(handles []sdk.Handle) {
	for _, h := range handles {
		if h.File != nil {
			_ = h.File.Close()
		}
	}
}
