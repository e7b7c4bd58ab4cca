package mockbackend

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// DefaultDir is where allocation files live unless WCACHE_MOCK_DIR says
// otherwise: /dev/shm/wcache-mock-<uid> when /dev/shm exists (memory, like a
// device), else <os.TempDir()>/wcache-mock-<uid>.
func DefaultDir() string {
	name := "wcache-mock-" + strconv.Itoa(os.Geteuid())
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return filepath.Join("/dev/shm", name)
	}
	return filepath.Join(os.TempDir(), name)
}

// ensurePrivateDir creates dir (and its parents) with mode 0700 when absent
// and verifies that it is a real directory (not a symlink), owned by the
// effective uid, with no group or other permissions: the files hold model
// weights, and Import trusts only files in this folder.
func ensurePrivateDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("mock folder %q must be an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create mock folder: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("inspect mock folder: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("mock folder %s is not a directory (a symlink?)", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("mock folder %s is owned by uid %d, not by us (uid %d)", dir, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return fmt.Errorf("mock folder %s has mode %04o; it must be private (chmod 700)", dir, st.Mode&0o7777)
	}
	return nil
}
