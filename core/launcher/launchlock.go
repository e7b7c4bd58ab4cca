package launcher

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/paths"
)

// ErrLaunchInProgress: another `wcache launch` holds the launch lock of a
// GPU of this layout.
var ErrLaunchInProgress = errors.New("another wcache launch is running on this GPU")

// LaunchLockSuffix names a GPU's launch lock: its ready file's path plus
// this suffix (next to the identity lock, Ready + ".lock"). Like the
// identity lock it stays in place, harmless and reused.
const LaunchLockSuffix = ".launch.lock"

// launchLocks are the flocks a launch holds on every GPU of its layout for
// its whole life, so that two launches racing over the same GPUs cannot both
// start daemons and then tear each other's down (each seeing the other's
// daemon on one GPU, each stopping its own on the others): the first to
// lock a GPU owns it, the other fails before it cleans, spawns or signals
// anything.
type launchLocks []func()

// lockLaunch takes the launch lock of every target through lock, in the
// order of their UUIDs (so that two overlapping launches cannot each hold a
// lock the other needs: one of them gets them all). When one fails it
// releases what it took and returns the error, naming the GPU.
func lockLaunch(targets []target, lock LaunchLockFunc) (launchLocks, error) {
	order := slices.Clone(targets)
	slices.SortFunc(order, func(a, b target) int { return strings.Compare(a.uuid, b.uuid) })
	var held launchLocks
	for _, t := range order {
		release, err := lock(t.paths)
		if err != nil {
			held.release()
			return nil, fmt.Errorf("GPU %d (%s): %w", t.rank.GPUID, t.uuid, err)
		}
		held = append(held, release)
	}
	return held, nil
}

// LaunchLockFunc takes the launch lock of one GPU without waiting and
// returns its release; LockLaunchFile is the default.
type LaunchLockFunc func(p paths.Paths) (release func(), err error)

// LockLaunchFile flocks p.Ready + LaunchLockSuffix (created 0600; a symlink
// or a non-regular file is refused) without waiting: an error wrapping
// ErrLaunchInProgress when another process holds it.
func LockLaunchFile(p paths.Paths) (func(), error) {
	path := p.Ready + LaunchLockSuffix
	f, err := openLaunchLock(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is locked: %w", path, ErrLaunchInProgress)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Closing the descriptor releases the flock.
	return func() { f.Close() }, nil
}

// openLaunchLock opens (creating, mode 0600) a launch lock file, refusing a
// symlink or anything but a regular file.
func openLaunchLock(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("launch lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%s)", st.Mode().Type())
		}
		return nil, fmt.Errorf("launch lock %s: %w", path, err)
	}
	return f, nil
}

// release releases every lock.
func (l launchLocks) release() {
	for _, r := range l {
		r()
	}
}
