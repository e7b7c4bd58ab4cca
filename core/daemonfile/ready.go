package daemonfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	PID           int    `json:"pid"`
	StartTime     uint64 `json:"start_time"` // /proc/<pid>/stat field 22
	DeviceUUID    string `json:"device_uuid"`
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
// wrapping fs.ErrNotExist; invalid JSON, a file over 1 MiB, or a pid <= 0
// wraps ErrMalformedReady. Unknown fields are ignored so that newer daemons
// can add some.
func ReadReady(path string) (Ready, error) {
	f, err := os.Open(path)
	if err != nil {
		return Ready{}, fmt.Errorf("read ready file: %w", err)
	}
	defer f.Close()
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
