package paths

import (
	"errors"
	"fmt"
)

// MaxSocketPathLen is the longest usable Unix socket path: sun_path is 108
// bytes including the terminating NUL.
const MaxSocketPathLen = 107

// ErrSocketPathTooLong is matched by errors.Is for every *SocketPathTooLongError.
var ErrSocketPathTooLong = errors.New("socket path too long")

// SocketPathTooLongError reports a socket path the kernel cannot bind.
type SocketPathTooLongError struct {
	Path string
	Len  int
}

func (e *SocketPathTooLongError) Error() string {
	return fmt.Sprintf("socket path %s is %d bytes, longer than the %d bytes a Unix socket path may have; "+
		"use a shorter template (%s or --socket-template) or a shorter XDG_RUNTIME_DIR",
		e.Path, e.Len, MaxSocketPathLen, EnvSocketTemplate)
}

// Unwrap lets errors.Is(err, ErrSocketPathTooLong) match.
func (e *SocketPathTooLongError) Unwrap() error { return ErrSocketPathTooLong }

// CheckSocketPath returns a *SocketPathTooLongError when path does not fit
// into sun_path.
func CheckSocketPath(path string) error {
	if len(path) > MaxSocketPathLen {
		return &SocketPathTooLongError{Path: path, Len: len(path)}
	}
	return nil
}
