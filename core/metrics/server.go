package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"golang.org/x/net/netutil"

	"github.com/wcache/wcache/core/daemon"
)

// ErrInUse: a live server already answers on the metrics Unix socket (a
// socket nobody listens on any more is stale and replaced).
var ErrInUse = errors.New("a live server answers on this socket")

// Timeouts of the metrics HTTP server.
const (
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	// maxConns bounds the scrapes served at once: any local user can
	// connect to a loopback port, and each connection costs the daemon a
	// descriptor. Connections beyond it wait in the kernel's queue (no
	// descriptor of the daemon) until a slot frees; a connection that sends
	// no request within readHeaderTimeout gives its slot back.
	maxConns = 16
	// probeTimeout bounds the dial that tells a live socket from a stale
	// one.
	probeTimeout = time.Second
)

// Server is an HTTP server on a metrics address. Make it with Start.
type Server struct {
	srv  *http.Server
	lis  net.Listener
	addr string
	// sock is the Unix socket file Start created ("" on TCP) and sockID
	// its identity, so that Shutdown removes only its own file.
	sock   string
	sockID fileID
	served chan error
}

// fileID identifies a file across renames.
type fileID struct{ dev, ino uint64 }

// Start listens on a and serves h there in the background.
//
// A Unix socket is created with daemon.ListenUnix: mode 0600 from the moment
// it exists (bound in a private directory and renamed into place), so only
// the daemon's user (and root) can scrape it. An existing socket at the path
// is replaced when nobody answers on it (stale) and refused with an error
// wrapping ErrInUse when someone does; any other file is refused. The
// path's directory must exist.
//
// A TCP listener of an address parsed without allowing remote access is
// closed again, with an error wrapping ErrNotLoopback, if it ended up on a
// non-loopback address ("localhost" resolving elsewhere).
func Start(a Addr, h http.Handler) (*Server, error) {
	s := &Server{served: make(chan error, 1)}
	switch a.Network {
	case "unix":
		if err := probeStale(a.Address); err != nil {
			return nil, err
		}
		l, err := daemon.ListenUnix(a.Address, nil)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		id, err := statID(a.Address)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("metrics socket %s: %w", a.Address, err)
		}
		s.lis, s.sock, s.sockID, s.addr = l, a.Address, id, a.String()
	case "tcp":
		l, err := net.Listen("tcp", a.Address)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if ta, ok := l.Addr().(*net.TCPAddr); !a.allowRemote && (!ok || !ta.IP.IsLoopback()) {
			l.Close()
			return nil, fmt.Errorf("metrics address %s listened on %s: %w", a, l.Addr(), ErrNotLoopback)
		}
		s.lis, s.addr = l, l.Addr().String()
	default:
		return nil, fmt.Errorf("metrics address %s: network %q: %w", a, a.Network, ErrBadAddr)
	}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, WriteTimeout: writeTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes}
	go func() { s.served <- s.srv.Serve(netutil.LimitListener(s.lis, maxConns)) }()
	return s, nil
}

// Addr is where the server listens: "unix:/path", or host:port with the
// port actually bound.
func (s *Server) Addr() string { return s.addr }

// Shutdown stops accepting scrapes, waits for those in flight until ctx
// ends (then closes them), and removes the Unix socket file if it is still
// the one Start created. It returns the server's own failure, if it failed
// before, and the errors of closing and removing.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	if err := s.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("metrics server shutdown: %w", err))
		_ = s.srv.Close()
	}
	if err := <-s.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("metrics server: %w", err))
	}
	if s.sock != "" {
		if id, err := statID(s.sock); err == nil && id == s.sockID {
			if err := os.Remove(s.sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing the metrics socket: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// probeStale returns nil when path does not exist, is not a socket (ListenUnix
// refuses it then) or is a socket nobody listens on; it fails with ErrInUse
// when a server answers, and with the dial error when it cannot tell.
func probeStale(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket {
		return nil
	}
	c, err := net.DialTimeout("unix", path, probeTimeout)
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("metrics socket %s: %w", path, ErrInUse)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("metrics socket %s: cannot tell whether a server answers on it: %w", path, err)
	}
}

// statID identifies the file at path (without following a symlink).
func statID(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no inode", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}
