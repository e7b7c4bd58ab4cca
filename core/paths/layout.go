package paths

import (
	"fmt"
	"os"
	"path/filepath"
)

// Environment variables and flag names that carry path templates. The flag
// names are the ones the CLI registers; they appear in error messages.
const (
	EnvSocketTemplate  = "WCACHE_SOCKET_TEMPLATE"
	EnvReadyTemplate   = "WCACHE_READY_TEMPLATE"
	FlagSocketTemplate = "--socket-template"
	FlagReadyTemplate  = "--ready-template"
)

// Default file names inside the private directory.
const (
	DefaultSocketName = DeviceUUIDPlaceholder + ".sock"
	DefaultReadyName  = DeviceUUIDPlaceholder + ".ready.json"
	// LockSuffix is appended to the ready file's path to name the lock file.
	LockSuffix = ".lock"
)

// Options selects the path templates. Each template is taken from its field
// (a flag value) when non-empty, else from its environment variable, else
// from the default inside DefaultDir.
type Options struct {
	SocketTemplate, ReadyTemplate string              // from flags; "" → env → default
	Getenv                        func(string) string // nil → os.Getenv
}

// Layout turns device UUIDs into Paths.
type Layout struct {
	Socket, Ready Template
	// Dir is the default private directory when either template is a
	// default one, and "" otherwise. For creates and verifies it.
	Dir string
}

// Paths are the discovery files of one device's daemon.
type Paths struct {
	DeviceUUID string
	Socket     string // the daemon's Unix socket
	Ready      string // the ready file (JSON), written once the socket listens
	Lock       string // the identity lock: Ready + ".lock"
}

// NewLayout resolves the templates as described on Options. It fails with a
// *TemplateError naming the flag or variable when a template is invalid, and
// when the socket and ready templates would name the same file.
func NewLayout(opts Options) (Layout, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var l Layout
	pick := func(flagValue, flagName, envName, defName string) (Template, error) {
		if flagValue != "" {
			return ParseTemplate(flagName, flagValue)
		}
		if v := getenv(envName); v != "" {
			return ParseTemplate(envName, v)
		}
		if l.Dir == "" {
			l.Dir = DefaultDir(getenv)
		}
		return ParseTemplate("default directory "+l.Dir+" (from XDG_RUNTIME_DIR or uid)", filepath.Join(l.Dir, defName))
	}
	var err error
	if l.Socket, err = pick(opts.SocketTemplate, FlagSocketTemplate, EnvSocketTemplate, DefaultSocketName); err != nil {
		return Layout{}, err
	}
	if l.Ready, err = pick(opts.ReadyTemplate, FlagReadyTemplate, EnvReadyTemplate, DefaultReadyName); err != nil {
		return Layout{}, err
	}
	if s, r := l.Socket.String(), l.Ready.String(); s == r || s == r+LockSuffix {
		return Layout{}, &TemplateError{Source: "socket and ready templates", Text: s, Err: ErrUnsafeTemplate,
			Detail: "the socket path would collide with the ready file or its lock file; use distinct templates"}
	}
	return l, nil
}

// For returns the paths of the daemon for device uuid, as Derive does, and,
// when the layout uses the default directory, creates and verifies that
// directory (EnsurePrivateDir: *PrivateDirError). Directories of custom
// templates are neither created nor checked here: they belong to whoever
// chose the template. A daemon calls For; a client that only looks calls
// Derive.
func (l Layout) For(uuid string) (Paths, error) {
	p, err := l.Derive(uuid)
	if err != nil {
		return Paths{}, err
	}
	if l.Dir != "" {
		if err := EnsurePrivateDir(l.Dir); err != nil {
			return Paths{}, err
		}
	}
	return p, nil
}

// Derive returns the paths of the daemon for device uuid without touching
// the file system. It validates the UUID (*InvalidUUIDError), checks the
// socket path length (*SocketPathTooLongError) and refuses a socket path that
// collides with the ready or lock file.
func (l Layout) Derive(uuid string) (Paths, error) {
	sock, err := l.Socket.Expand(uuid)
	if err != nil {
		return Paths{}, fmt.Errorf("socket path: %w", err)
	}
	ready, err := l.Ready.Expand(uuid)
	if err != nil {
		return Paths{}, fmt.Errorf("ready file path: %w", err)
	}
	p := Paths{DeviceUUID: uuid, Socket: sock, Ready: ready, Lock: ready + LockSuffix}
	if err := CheckSocketPath(sock); err != nil {
		return Paths{}, err
	}
	if p.Socket == p.Ready || p.Socket == p.Lock {
		return Paths{}, fmt.Errorf("device %s: socket path %s collides with the ready file or its lock; use distinct templates",
			uuid, sock)
	}
	return p, nil
}

// ReadyGlob returns a filepath.Glob pattern matching the ready files of every
// device under this layout: the ready template with {device_uuid} replaced by
// "*" and glob metacharacters of the literal text escaped. `wcache status`
// uses it to list daemons. Depending on the template the pattern can match
// other files too (lock files, temporary files): filter matches with ReadyUUID.
func (l Layout) ReadyGlob() string { return l.Ready.glob() }

// ReadyUUID reports the device UUID whose ready file is path under this
// layout, and whether path is such a ready file at all (a lock file or an
// unrelated match of ReadyGlob is not).
func (l Layout) ReadyUUID(path string) (string, bool) {
	parts := l.Ready.parts
	if len(parts) < 2 {
		return "", false
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(path) < len(first)+len(last) || path[:len(first)] != first || path[len(path)-len(last):] != last {
		return "", false
	}
	// The first placeholder's value ends where the second literal begins;
	// for a single placeholder it is the whole middle.
	rest := path[len(first) : len(path)-len(last)]
	uuid := rest
	if len(parts) > 2 {
		for i := 1; i <= len(rest) && i <= MaxDeviceUUIDLen; i++ {
			if candidate := rest[:i]; ValidateDeviceUUID(candidate) == nil {
				if got, err := l.Ready.Expand(candidate); err == nil && got == path {
					return candidate, true
				}
			}
		}
		return "", false
	}
	if ValidateDeviceUUID(uuid) != nil {
		return "", false
	}
	return uuid, true
}
