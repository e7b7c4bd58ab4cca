// Package memfdseal is the daemon's half of the memfd seals: Seal adds
// the serve seals to a memfd a backend created (sdk.NewMemfd, sealed with
// sdk.MemfdSeals only) once it is filled, before any client may attach.
// core/daemon seals the memfds of published handles with it, and
// core/daemon/fill the staging memfds of network fills.
package memfdseal

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// serveSeals are the seals Seal adds before any client may attach to a
// memfd: from then on nobody — root included, and whatever file
// description it holds or reopens through /proc — can write(2) to it, map
// it shared and writable, punch holes in it, or add or remove a seal.
// F_SEAL_WRITE also proves that no writable shared mapping remained (it
// cannot be added while one exists), so a publisher's write access ends
// with its commit. Private (copy-on-write) mappings stay allowed: a
// client's writes to its view then stay its own.
const serveSeals = unix.F_SEAL_WRITE | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL

// ErrWritableMapping is returned by Seal when a writable shared mapping of
// the memfd still exists (in any process) and F_SEAL_WRITE cannot be added
// (EBUSY).
var ErrWritableMapping = errors.New("a writable shared mapping of the memory is still open")

// Seal adds the serve seals (F_SEAL_WRITE, F_SEAL_FUTURE_WRITE,
// F_SEAL_SEAL) to the memfd f: after it returns nil, the memory is
// read-only for every holder. A memfd that carries them already is left as
// it is (nil). A writable shared mapping still open anywhere is
// ErrWritableMapping (nothing is sealed); a memfd sealed with F_SEAL_SEAL
// but not the serve seals (someone else sealed it first) is an error too.
func Seal(f *os.File) error {
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("seal %s: F_GET_SEALS: %w", f.Name(), err)
	}
	if seals&serveSeals == serveSeals {
		return nil
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, serveSeals); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("seal %s against writes: %w (F_SEAL_WRITE: %v)", f.Name(), ErrWritableMapping, err)
		}
		return fmt.Errorf("seal %s against writes (seals were %#x): %w", f.Name(), seals, err)
	}
	return nil
}

// SealFutureWrites adds F_SEAL_FUTURE_WRITE and F_SEAL_SEAL to the memfd
// f: no new write(2) or writable shared mapping, and no seal added or
// removed, while a writable shared mapping that already exists stays (the
// weaker seal for memory whose backend keeps such a mapping, after Seal
// returned ErrWritableMapping). Errors are the fcntl's.
func SealFutureWrites(f *os.File) error {
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("seal %s against new writes: %w", f.Name(), err)
	}
	return nil
}
