package paths

import "path/filepath"

// InDir is the layout whose sockets and ready files all live in dir
// (dir/{device_uuid}.sock and dir/{device_uuid}.ready), whatever the
// environment says: for daemons embedded in another program, and for
// tests. dir must be absolute and short enough for a socket path (see
// NewLayout's errors).
func InDir(dir string) (Layout, error) {
	return NewLayout(Options{
		SocketTemplate: filepath.Join(dir, "{device_uuid}.sock"),
		ReadyTemplate:  filepath.Join(dir, "{device_uuid}.ready"),
		Getenv:         func(string) string { return "" },
	})
}
