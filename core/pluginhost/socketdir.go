package pluginhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	hclog "github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/procstat"
)

// maxSocketBase is the longest base folder for the plugin's socket: the
// socket path adds about 45 bytes
// ("/wcache-plugin-PID-N/plugin-dirN/pluginN") and sun_path holds 107.
const maxSocketBase = 60

// socketDirPrefix starts the name of every plugin socket folder; the host's
// pid follows, so that folders of dead hosts can be recognised.
const socketDirPrefix = "wcache-plugin-"

// socketBase picks the folder in which plugin socket folders are created:
// dir, else os.TempDir(), or /tmp when that is too long for a socket path.
func socketBase(dir string) (string, error) {
	if dir == "" {
		dir = os.TempDir()
		if len(dir) > maxSocketBase {
			dir = "/tmp"
		}
	}
	if len(dir) > maxSocketBase {
		return "", fmt.Errorf("plugin socket folder %s is longer than %d bytes; a Unix socket path holds 107", dir, maxSocketBase)
	}
	return dir, nil
}

// makeSocketDir creates a private folder for one plugin's socket,
// wcache-plugin-<our pid>-<random>, after removing the folders that hosts
// killed before they could clean up left in base.
func makeSocketDir(base string, log hclog.Logger) (string, error) {
	removeStaleSocketDirs(base, log)
	dir, err := os.MkdirTemp(base, socketDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("create the plugin socket folder: %w", err)
	}
	return dir, nil
}

// removeStaleSocketDirs deletes socket folders of hosts that no longer run.
// Only real directories owned by us, named with a pid that is not alive,
// are touched.
func removeStaleSocketDirs(base string, log hclog.Logger) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, socketDirPrefix) {
			continue
		}
		pidText, _, ok := strings.Cut(strings.TrimPrefix(name, socketDirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == self || procstat.Running(pid) {
			continue
		}
		path := filepath.Join(base, name)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil || int(st.Uid) != os.Geteuid() || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			log.Debug("cannot remove a stale plugin socket folder", "dir", path, "error", err)
			continue
		}
		log.Debug("removed the socket folder of a dead wcache process", "dir", path, "pid", pid)
	}
}
