package pluginhost

import (
	"errors"
	"fmt"
	"strconv"
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
	// ErrConfigure: the plugin refused --backend-opt (*ConfigureError).
	ErrConfigure = errors.New("backend plugin configuration refused")
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

// APIVersionError reports a plugin that speaks none of the backend API
// versions this host offers.
type APIVersionError struct {
	Path      string
	Expected  int   // the newest version this host speaks
	Got       int   // what the plugin announced
	Supported []int // every version this host speaks
}

func (e *APIVersionError) Error() string {
	supported := e.Supported
	if len(supported) == 0 {
		supported = []int{e.Expected}
	}
	vs := make([]string, len(supported))
	for i, v := range supported {
		vs[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("%s: %s speaks backend API version %d, this wcache expects version %d (it speaks %s). "+
		"If you installed the plugin, install the release built for this wcache. If you build it, "+
		"build it with the github.com/wcache/wcache/sdk of this wcache release, whose sdk/plugin.Serve offers every version it speaks "+
		"(sdk.APIVersions; narrow them only with plugin.WithAPIVersions), see docs/writing-a-backend.md, \"API versions\"",
		ErrAPIVersion, e.Path, e.Got, e.Expected, strings.Join(vs, ", "))
}

// Unwrap returns ErrAPIVersion.
func (e *APIVersionError) Unwrap() error { return ErrAPIVersion }

// ConfigureError reports a plugin that refused its configuration (an
// unknown key, a malformed value, a factory that failed) or cannot take
// one. It matches ErrConfigure and the plugin's error (sdk kinds too).
type ConfigureError struct {
	Path string
	Err  error
}

func (e *ConfigureError) Error() string {
	return fmt.Sprintf("configure backend plugin %s: %v", e.Path, e.Err)
}

// Unwrap lets errors.Is match ErrConfigure and the cause.
func (e *ConfigureError) Unwrap() []error { return []error{ErrConfigure, e.Err} }

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
