package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
)

// UUIDResolver maps a device ordinal, as the calling process sees it, to the
// device's UUID. A backend plugin (sdk.Backend) is one.
type UUIDResolver interface {
	DeviceUUID(ctx context.Context, ordinal int) (string, error)
}

// Target says which daemon to talk to. Make one with BySocket,
// ByDeviceUUID or ByOrdinal.
type Target struct {
	socket   string
	uuid     string
	layout   paths.Layout
	resolver UUIDResolver
	ordinal  int
}

// BySocket targets the daemon listening at an explicit socket path.
func BySocket(path string) Target { return Target{socket: path} }

// ByDeviceUUID targets the daemon of a device UUID under layout.
func ByDeviceUUID(layout paths.Layout, uuid string) Target {
	return Target{layout: layout, uuid: uuid}
}

// ByOrdinal targets the daemon of the device the caller sees as ordinal;
// the UUID is resolved through r when the target is dialed, so that it is
// the GPU the caller actually uses at that moment.
func ByOrdinal(layout paths.Layout, r UUIDResolver, ordinal int) Target {
	return Target{layout: layout, resolver: r, ordinal: ordinal}
}

func (t Target) String() string {
	switch {
	case t.socket != "":
		return "socket " + t.socket
	case t.resolver != nil:
		return fmt.Sprintf("device ordinal %d", t.ordinal)
	default:
		return "device " + t.uuid
	}
}

// resolve returns the socket path and device UUID ("" for an explicit
// socket) of the target.
func (t Target) resolve(ctx context.Context) (socket, uuid string, err error) {
	if t.socket != "" {
		return t.socket, "", nil
	}
	uuid = t.uuid
	if t.resolver != nil {
		if uuid, err = t.resolver.DeviceUUID(ctx, t.ordinal); err != nil {
			return "", "", fmt.Errorf("device UUID of ordinal %d: %w", t.ordinal, err)
		}
	}
	if t.layout.Socket.IsZero() {
		return "", "", errors.New("no path layout to find the daemon of " + uuid)
	}
	// Derive validates the UUID before it names a path, and touches
	// nothing: a client only looks.
	p, err := t.layout.Derive(uuid)
	if err != nil {
		return "", "", err
	}
	return p.Socket, uuid, nil
}

// checkSocket applies the discovery rules to path: absent → *NoDaemonError;
// symlink, not a socket, or owned by a uid other than ours or allowOwners
// → *UnsafeSocketError.
func checkSocket(path, uuid string, allowOwners []uint32) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &NoDaemonError{Socket: path, DeviceUUID: uuid, Others: daemonfile.ForeignDaemons(uint32(os.Geteuid()))}
	}
	if err != nil {
		return fmt.Errorf("daemon socket %s: %w", path, err)
	}
	switch typ := fi.Mode().Type(); {
	case typ == fs.ModeSymlink:
		return &UnsafeSocketError{Socket: path, Reason: "is a symlink (a daemon never creates one; something else put it there)"}
	case typ != fs.ModeSocket:
		return &UnsafeSocketError{Socket: path, Reason: "is " + describeType(typ) + ", not a socket"}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("daemon socket %s: no owner information", path)
	}
	if euid := uint32(os.Geteuid()); st.Uid != euid && !slices.Contains(allowOwners, st.Uid) {
		return &UnsafeSocketError{Socket: path,
			Reason: fmt.Sprintf("is owned by uid %d, not by this user (uid %d)", st.Uid, euid)}
	}
	return nil
}

// describeType names a file type for messages.
func describeType(t fs.FileMode) string {
	switch t {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeNamedPipe:
		return "a named pipe"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "a device"
	default:
		return "a " + t.String() + " file"
	}
}
