package mockbackend

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	hclog "github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk/procstat"
)

// fileNamePattern matches allocation files: <pid>-<instance>-<id>.shm. The
// pid lets a later mock remove the files of a mock that died without
// cleaning up; the instance nonce keeps two backends of one process apart.
var fileNamePattern = regexp.MustCompile(`^([0-9]+)-([0-9a-f]{16})-([0-9]+)\.shm$`)

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

// removeStaleFiles deletes the allocation files of mock processes that are
// no longer alive (crashed or SIGKILLed before they could clean up). Files
// of live processes, including our own, are left alone; a pid reused by an
// unrelated process keeps its files until that process is gone too.
func removeStaleFiles(dir string, self int, log hclog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		log.Warn("cannot scan mock folder for stale files", "dir", dir, "error", err)
		return
	}
	for _, e := range entries {
		m := fileNamePattern.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == self || procstat.Running(pid) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("cannot remove stale allocation file", "path", path, "error", err)
			continue
		}
		log.Info("removed allocation file of a dead mock process", "path", path, "pid", pid)
	}
}
