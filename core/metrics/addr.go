package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/wcache/wcache/core/paths"
)

// UnixPrefix marks a Unix socket address: "unix:/run/wcache/metrics.sock".
const UnixPrefix = "unix:"

// ErrNotLoopback: a TCP address whose host is not a loopback address
// (127.0.0.0/8, ::1 or "localhost"), given without allowing remote access.
// An empty host ("":9100) listens on every interface and is not loopback.
var ErrNotLoopback = errors.New("not a loopback address")

// ErrBadAddr: an address that is neither "unix:/absolute/path" nor
// "host:port".
var ErrBadAddr = errors.New("want unix:/absolute/path or host:port")

// Addr is where the metrics endpoint listens. Make it with ParseAddr.
type Addr struct {
	// Network is "unix" or "tcp".
	Network string
	// Address is the socket path ("unix") or host:port ("tcp").
	Address string
	// allowRemote lets a TCP listener end up on a non-loopback address.
	allowRemote bool
}

// String is the address as ParseAddr reads it.
func (a Addr) String() string {
	if a.Network == "unix" {
		return UnixPrefix + a.Address
	}
	return a.Address
}

// ParseAddr reads a metrics address: "unix:/absolute/path" (at most
// paths.MaxSocketPathLen bytes) or "host:port" with a numeric port (0 picks
// a free one). Unless allowRemote, the host must be a loopback IP address or
// "localhost" (names are not resolved here; Start checks the address it
// actually bound); anything else fails with an error wrapping
// ErrNotLoopback. A malformed address wraps ErrBadAddr.
func ParseAddr(s string, allowRemote bool) (Addr, error) {
	if path, ok := strings.CutPrefix(s, UnixPrefix); ok {
		switch {
		case !filepath.IsAbs(path):
			return Addr{}, fmt.Errorf("metrics address %q: the socket path must be absolute: %w", s, ErrBadAddr)
		case len(path) > paths.MaxSocketPathLen:
			return Addr{}, fmt.Errorf("metrics address %q: the socket path is %d bytes, a Unix socket path may have %d: %w",
				s, len(path), paths.MaxSocketPathLen, ErrBadAddr)
		case strings.ContainsRune(path, 0):
			return Addr{}, fmt.Errorf("metrics address %q: NUL in the socket path: %w", s, ErrBadAddr)
		}
		return Addr{Network: "unix", Address: filepath.Clean(path)}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Addr{}, fmt.Errorf("metrics address %q: %w (%v)", s, ErrBadAddr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || strconv.FormatUint(n, 10) != port {
		return Addr{}, fmt.Errorf("metrics address %q: port %q is not a number from 0 to 65535: %w", s, port, ErrBadAddr)
	}
	if !allowRemote && !isLoopbackHost(host) {
		return Addr{}, fmt.Errorf("metrics address %q: %w (127.0.0.0/8, ::1 or localhost)", s, ErrNotLoopback)
	}
	return Addr{Network: "tcp", Address: s, allowRemote: allowRemote}, nil
}

// Check finds what would make Start fail on a Unix socket and can be seen
// before the daemon starts: the socket's directory is missing or not a
// directory, or a file that is not a socket is in the way. It does not
// probe for a live server (a daemon taking over from another one listens
// after the other has gone). On TCP it checks nothing.
func (a Addr) Check() error {
	if a.Network != "unix" {
		return nil
	}
	dir := filepath.Dir(a.Address)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("metrics socket %s: %w", a.Address, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("metrics socket %s: %s is not a directory", a.Address, dir)
	}
	if fi, err := os.Lstat(a.Address); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("metrics socket %s: the path exists and is not a socket (%s); refusing to replace it",
			a.Address, fi.Mode().Type())
	}
	return nil
}

// isLoopbackHost reports whether host is "localhost" or a loopback IP
// address (an IPv6 zone is ignored).
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.WithZone("").IsLoopback()
}
