package pluginhost

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// checkPlugin refuses a plugin that another user could replace or modify:
// it must be a regular, executable file owned by root or by us, not
// writable by group or others, in a folder that passes checkFolder.
// Otherwise anyone with write access could run code as the wcache user.
func checkPlugin(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("inspect backend plugin %s: %w", path, err)
	}
	mode := st.Mode & 0o7777
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return &InsecurePluginError{Path: path, Reason: "is not a regular file"}
	case mode&0o111 == 0:
		return &InsecurePluginError{Path: path, Reason: fmt.Sprintf("is not executable (mode %04o)", mode)}
	}
	if err := checkWriters(path, "", &st); err != nil {
		return err
	}
	return checkFolder(filepath.Dir(path))
}

// checkFolder refuses a folder in which others could swap the plugin.
func checkFolder(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("inspect backend plugin folder %s: %w", dir, err)
	}
	return checkWriters(dir, "(the plugin's folder) ", &st)
}

// checkWriters refuses path (st its stat) if others could write it:
// writable by group or others, or owned by another non-root user. what
// opens the reason.
func checkWriters(path, what string, st *unix.Stat_t) error {
	mode := st.Mode & 0o7777
	switch {
	case mode&0o022 != 0:
		return &InsecurePluginError{Path: path, Reason: what + fmt.Sprintf("is writable by group or others (mode %04o); run chmod go-w on it", mode)}
	case !trustedOwner(st.Uid):
		return &InsecurePluginError{Path: path, Reason: what + fmt.Sprintf("is owned by uid %d, neither root nor us (uid %d)", st.Uid, os.Geteuid())}
	}
	return nil
}

func trustedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }
