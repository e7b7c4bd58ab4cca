package daemon

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/fdpass"
	"github.com/wcache/wcache/internal/memfdseal"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// handleFiles are the descriptors of one generation's descriptor handles
// (memfd, cuda-vmm-fd), by handle index (nil for a name handle). The daemon
// holds them for as long as it holds the generation: the memory then does
// not depend on the plugin process (invariant 8), a restarted plugin or a
// successor daemon imports them, and clients receive them on the
// descriptor channel.
type handleFiles struct {
	// mu guards own and client against close while a request duplicates
	// them.
	mu sync.RWMutex
	// own are the descriptors Export returned (writable).
	own []*os.File
	// client are what a lease receives: a memfd reopened read-only through
	// /proc/self/fd (a client can then neither write to the weights nor map
	// them writable), the own descriptor for other kinds, and for a memfd
	// where /proc is not mounted.
	client []*os.File
	sizes  []uint64
	// memfd[i]: handle i is a memfd (sealed against writes by seal).
	memfd []bool
}

// newHandleFiles takes over the Files of handles; nil when none has one.
func newHandleFiles(handles []sdk.Handle) *handleFiles {
	hasFile := false
	for _, h := range handles {
		hasFile = hasFile || h.File != nil
	}
	if !hasFile {
		return nil
	}
	hf := &handleFiles{own: make([]*os.File, len(handles)), client: make([]*os.File, len(handles)),
		sizes: make([]uint64, len(handles)), memfd: make([]bool, len(handles))}
	for i, h := range handles {
		hf.own[i], hf.client[i], hf.sizes[i] = h.File, h.File, h.Size
		if h.File == nil || h.Kind != names.KindMemfd {
			continue
		}
		hf.memfd[i] = true
		if ro, err := reopenReadOnly(h.File); err == nil {
			hf.client[i] = ro
		}
	}
	return hf
}

// seal seals every memfd against writes (memfdseal.Seal: F_SEAL_WRITE,
// F_SEAL_FUTURE_WRITE, F_SEAL_SEAL) before any client may attach: from then
// on no holder can change the bytes, whatever descriptor it holds or
// reopens. A writable shared mapping still open (a publisher that kept its
// mapping past the commit, or a backend that keeps one) is
// memfdseal.ErrWritableMapping; with lenient (memory the daemon's own backend
// filled) the daemon then adds F_SEAL_FUTURE_WRITE and F_SEAL_SEAL alone
// (no new write, no new writable mapping; the backend's mapping stays) and
// reports that it did so through weak. A nil receiver has nothing to seal.
func (hf *handleFiles) seal(lenient bool) (weak int, err error) {
	if hf == nil {
		return 0, nil
	}
	hf.mu.RLock()
	defer hf.mu.RUnlock()
	if hf.own == nil {
		return 0, errFilesClosed
	}
	for i, f := range hf.own {
		if f == nil || !hf.memfd[i] {
			continue
		}
		err := memfdseal.Seal(f)
		if err != nil && lenient && errors.Is(err, memfdseal.ErrWritableMapping) {
			if memfdseal.SealFutureWrites(f) == nil {
				weak++
				continue
			}
		}
		if err != nil {
			return weak, fmt.Errorf("handle %d: %w", i, err)
		}
	}
	return weak, nil
}

// sealWrites seals m's memfds against writes (handleFiles.seal) and logs
// the handles a backend's own writable mapping left sealed against new
// writes only.
func (d *Daemon) sealWrites(m *manifest, lenient bool) error {
	weak, err := m.files.seal(lenient)
	if weak > 0 {
		d.log.Warn("the backend keeps writable mappings of its memfds: sealed against new writes only (F_SEAL_FUTURE_WRITE), not F_SEAL_WRITE",
			"handles", weak)
	}
	if err != nil {
		return fmt.Errorf("seal the memory against writes: %w", err)
	}
	return nil
}

// reopenReadOnly opens a new read-only file description of f's file.
func reopenReadOnly(f *os.File) (*os.File, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen descriptor %d read-only: %w", f.Fd(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()+" (read-only)"), nil
}

// errFilesClosed: the generation's descriptors were closed (freed).
var errFilesClosed = errors.New("the descriptors were released (the daemon is stopping or evicted)")

// descriptors returns duplicates of the client (or, writable, the own)
// descriptors with their handle index and size, in handle order; the
// caller closes them (fdchannel.CloseAll). A nil receiver has none; after
// close it is errFilesClosed.
func (hf *handleFiles) descriptors(writable bool) ([]fdchannel.Descriptor, error) {
	if hf == nil {
		return nil, nil
	}
	hf.mu.RLock()
	defer hf.mu.RUnlock()
	files := hf.client
	if writable {
		files = hf.own
	}
	if files == nil {
		return nil, errFilesClosed
	}
	var out []fdchannel.Descriptor
	for i, f := range files {
		if f == nil {
			continue
		}
		dup, err := fdpass.Dup(f)
		if err != nil {
			fdchannel.CloseAll(out)
			return nil, err
		}
		out = append(out, fdchannel.Descriptor{Handle: uint32(i), Size: hf.sizes[i], File: dup})
	}
	return out, nil
}

// count is the number of descriptor handles (0 once closed).
func (hf *handleFiles) count() int {
	if hf == nil {
		return 0
	}
	hf.mu.RLock()
	defer hf.mu.RUnlock()
	n := 0
	for _, f := range hf.own {
		if f != nil {
			n++
		}
	}
	return n
}

// ownFile returns handle i's own descriptor, or nil (a name handle, or closed).
func (hf *handleFiles) ownFile(i int) *os.File {
	if hf == nil {
		return nil
	}
	hf.mu.RLock()
	defer hf.mu.RUnlock()
	if i >= len(hf.own) {
		return nil
	}
	return hf.own[i]
}

// close closes every descriptor; the memory goes when the last other holder
// (a client's descriptor or mapping) goes. A nil receiver is a no-op.
func (hf *handleFiles) close() {
	if hf == nil {
		return
	}
	hf.mu.Lock()
	defer hf.mu.Unlock()
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
