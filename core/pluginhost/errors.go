package pluginhost

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wcache/wcache/sdk"
)

// Sentinels for errors.Is.
var (
	// ErrPluginNotFound: no wcache-backend-NAME in any searched folder.
	ErrPluginNotFound = errors.New("backend plugin not found")
	// ErrInvalidName: the backend name is not [a-z0-9-]+.
	ErrInvalidName = errors.New("invalid backend name")
	// ErrInsecurePlugin: the plugin file or its folder can be modified by
	// other users, or is not a regular executable file.
	ErrInsecurePlugin = errors.New("insecure backend plugin")
	// ErrChecksumMismatch: the binary does not match the SHA-256 pin.
	ErrChecksumMismatch = errors.New("backend plugin checksum mismatch")
	// ErrAPIVersion: the plugin speaks another backend API version.
	ErrAPIVersion = errors.New("backend plugin API version mismatch")
)

// NotFoundError lists where a plugin was looked for.
type NotFoundError struct {
	Name     string   // backend name, e.g. "cuda"
	Binary   string   // file name, e.g. "wcache-backend-cuda"
	Searched []string // folders, in search order
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s: no %s in %s (set --plugin-dir or $%s)", ErrPluginNotFound, e.Binary,
		strings.Join(e.Searched, ", "), EnvPluginDir)
}

// Unwrap returns ErrPluginNotFound.
func (e *NotFoundError) Unwrap() error { return ErrPluginNotFound }

// InsecurePluginError explains why a plugin file was refused.
type InsecurePluginError struct {
	Path   string // the file or folder at fault
	Reason string
}

func (e *InsecurePluginError) Error() string {
	return fmt.Sprintf("refusing backend plugin: %s %s", e.Path, e.Reason)
}

// Unwrap returns ErrInsecurePlugin.
func (e *InsecurePluginError) Unwrap() error { return ErrInsecurePlugin }

// ChecksumError reports a binary that does not match its pin.
type ChecksumError struct {
	Path          string
	Expected, Got string // hex
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%s: %s has sha256 %s, pinned %s", ErrChecksumMismatch, e.Path, e.Got, e.Expected)
}

// Unwrap returns ErrChecksumMismatch.
func (e *ChecksumError) Unwrap() error { return ErrChecksumMismatch }

// APIVersionError reports a plugin built for another backend API.
type APIVersionError struct {
	Path     string
	Expected int // this wcache's sdk.APIVersion
	Got      int // what the plugin announced
}

func (e *APIVersionError) Error() string {
	return fmt.Sprintf("%s: %s speaks backend API version %d, this wcache expects version %d; install the plugin built with this wcache release",
		ErrAPIVersion, e.Path, e.Got, e.Expected)
}

// Unwrap returns ErrAPIVersion.
func (e *APIVersionError) Unwrap() error { return ErrAPIVersion }

// ExitError reports a plugin process that ended on its own (crashed,
// exited, was killed by someone else), or that failed before the handshake
// completed, with its last log lines. It wraps sdk.ErrUnavailable: the
// device memory the plugin held is gone.
type ExitError struct {
	Path string
	PID  int      // 0 when the process never started
	Err  error    // the wait status (*exec.ExitError) or the start failure
	Logs []string // the plugin's last log lines, oldest first
}

func (e *ExitError) Error() string {
	var b strings.Builder
	switch {
	case e.PID > 0 && e.Err == nil:
		fmt.Fprintf(&b, "backend plugin %s (pid %d) exited with status 0", e.Path, e.PID)
	case e.PID > 0:
		fmt.Fprintf(&b, "backend plugin %s (pid %d) exited: %v", e.Path, e.PID, e.Err)
	default:
		fmt.Fprintf(&b, "backend plugin %s failed to start: %v", e.Path, e.Err)
	}
	if len(e.Logs) == 0 {
		b.WriteString(" (it wrote no log lines)")
		return b.String()
	}
	b.WriteString("; its last log lines:")
	for _, l := range e.Logs {
		b.WriteString("\n    ")
		b.WriteString(l)
	}
	return b.String()
}

// Unwrap lets errors.Is match sdk.ErrUnavailable and the wait error.
func (e *ExitError) Unwrap() []error {
	if e.Err == nil {
		return []error{sdk.ErrUnavailable}
	}
	return []error{sdk.ErrUnavailable, e.Err}
}
