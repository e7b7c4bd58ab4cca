package daemonfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxReadySize bounds how much of a ready file ReadReady reads.
const maxReadySize = 1 << 20

// ErrMalformedReady is wrapped by ReadReady when the file exists but is not a
// valid ready file.
var ErrMalformedReady = errors.New("malformed ready file")

// Ready is the content of a daemon's ready file, written once its socket
// listens. Clients and `wcache status` read it; stale cleanup uses PID and
// StartTime to tell a live daemon from a dead one.
type Ready struct {
	PID        int    `json:"pid"`
	StartTime  uint64 `json:"start_time"` // /proc/<pid>/stat field 22
	DeviceUUID string `json:"device_uuid"`
	// GPU is the device ordinal as the daemon (and its plugin) saw it:
	// what `wcache serve --gpu-id` named. Another process with other
	// visibility settings may number the device differently; the UUID is
	// the identity.
	GPU           int    `json:"gpu"`
	Socket        string `json:"socket"`
	Backend       string `json:"backend"`
	Model         string `json:"model"`
	ConfigDigest  string `json:"config_digest"`
	Version       string `json:"version"`
	CreatedUnixMS int64  `json:"created_unix_ms"`
}

// WriteReady writes r to path atomically: to a temporary file in the same
// directory (mode 0600), fsync, rename over path, fsync the directory. A
// reader sees either the old file, no file, or the complete new one. On
// failure the temporary file is removed and path is untouched.
func WriteReady(path string, r Ready) (err error) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ready file %s: %w", path, err)
	}
	data = append(data, '\n')
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix(path)+"*")
	if err != nil {
		return fmt.Errorf("write ready file %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("write ready file %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write ready file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write ready file %s: fsync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write ready file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write ready file %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write ready file %s: %w", path, err)
	}
	return nil
}

// tempPrefix is the name prefix of WriteReady's temporary files for path.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// ReadReady reads and decodes a ready file. A missing file is an error
// wrapping fs.ErrNotExist; invalid JSON, a file over 1 MiB, a pid <= 0, or
// something other than a regular file (a symlink, a FIFO: it is opened
// without following or blocking) wraps ErrMalformedReady. A file owned by
// neither root nor the effective uid is an *UntrustedFileError: anyone
// sharing the directory could have written it, naming any process. Unknown
// fields are ignored so that newer daemons can add some.
func ReadReady(path string) (Ready, error) {
	r, _, err := readReady(path)
	return r, err
}

// readReady is ReadReady, also returning the file's owner uid.
func readReady(path string) (Ready, uint32, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ELOOP) {
		return Ready{}, 0, fmt.Errorf("read ready file %s: a symbolic link: %w", path, ErrMalformedReady)
	}
	if err != nil {
		return Ready{}, 0, fmt.Errorf("read ready file: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Ready{}, 0, fmt.Errorf("read ready file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Ready{}, 0, fmt.Errorf("read ready file %s: not a regular file (%s): %w", path, fi.Mode().Type(), ErrMalformedReady)
	}
	owner, ok := fileOwner(fi)
	if !ok || !TrustedOwner(owner) {
		return Ready{}, owner, &UntrustedFileError{Path: path, UID: owner}
	}
	r, err := decodeReady(path, f)
	return r, owner, err
}

// decodeReady decodes the ready file open as f.
func decodeReady(path string, f *os.File) (Ready, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxReadySize+1))
	if err != nil {
		return Ready{}, fmt.Errorf("read ready file %s: %w", path, err)
	}
	if len(data) > maxReadySize {
		return Ready{}, fmt.Errorf("read ready file %s: larger than %d bytes: %w", path, maxReadySize, ErrMalformedReady)
	}
	var r Ready
	if err := json.Unmarshal(data, &r); err != nil {
		return Ready{}, fmt.Errorf("read ready file %s: %w: %v", path, ErrMalformedReady, err)
	}
	if r.PID <= 0 {
		return Ready{}, fmt.Errorf("read ready file %s: pid %d: %w", path, r.PID, ErrMalformedReady)
	}
	return r, nil
}
