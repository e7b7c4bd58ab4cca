package mock

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

	"github.com/wcache/wcache/internal/procstat"
	"github.com/wcache/wcache/sdk"
)

// fileNamePattern matches allocation files: <pid>-<instance>-<id>.shm. The
// pid lets a later Memory remove the files of one that died without
// cleaning up; the instance nonce keeps two backends of one process apart.
var fileNamePattern = regexp.MustCompile(`^([0-9]+)-([0-9a-f]{16})-([0-9]+)\.shm$`)

// fileName is the name of allocation file id of process pid's instance
// nonce (16 hex digits).
func fileName(pid int, nonce string, id sdk.AllocationID) string {
	return fmt.Sprintf("%d-%s-%d.shm", pid, nonce, id)
}

// removeStaleFiles deletes the allocation files of processes that are no
// longer alive (crashed or SIGKILLed before they could clean up). Files
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

// checkFolderSpaceLocked refuses, with ErrOutOfMemory, an allocation of
// size bytes that the folder's file system clearly cannot hold: more than
// its free space (statfs f_bavail) less the bytes this backend's own
// allocations have yet to fill (allocation files are sparse until Load
// writes them, so the file system does not count them yet). A file system
// that reports no block count (tmpfs mounted with size=0 is unlimited)
// is not checked. Allocations of other processes in the same folder are
// not known here; a Load that then finds the folder full fails with
// ErrOutOfMemory (see writeChunk). The caller holds m.mu, which keeps
// every listed allocation's file open.
func (m *Memory) checkFolderSpaceLocked(size uint64) error {
	dir := m.opts.Dir
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("free space of %s: %w", dir, err)
	}
	if st.Blocks == 0 {
		return nil
	}
	avail := st.Bavail * uint64(st.Bsize)
	var pending uint64
	for _, a := range m.allocs {
		if a.imported || a.memfd {
			continue
		}
		var fst unix.Stat_t
		if err := unix.Fstat(a.fd, &fst); err != nil {
			return fmt.Errorf("free space of %s: stat %s: %w", dir, a.path, err)
		}
		if filled := uint64(fst.Blocks) * 512; filled < a.size {
			pending += a.size - filled
		}
	}
	if free := avail - min(avail, pending); size > free {
		return sdk.Errorf(sdk.ErrOutOfMemory, "%s has %d bytes free, %d of them promised to this backend's unfilled allocations: %d bytes do not fit",
			dir, avail, min(avail, pending), size)
	}
	return nil
}
