package plugin

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/backendplugin"
	"github.com/wcache/wcache/internal/fdpass"
)

// openFDChannel opens the plugin descriptor channel named by
// $WCACHE_BACKEND_FD_CHANNEL (read through getenv). Unset: nil, nil (a host
// without one; descriptor handles are then refused). A value that is not a
// descriptor of a SOCK_SEQPACKET Unix socket is an error.
func openFDChannel(getenv func(string) string) (*fdpass.Channel, error) {
	v := strings.TrimSpace(getenv(backendplugin.EnvFDChannel))
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: want a descriptor number of 3 or more", backendplugin.EnvFDChannel, v)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_SEQPACKET {
		return nil, fmt.Errorf("%s=%d: not a SOCK_SEQPACKET socket (type %d, %v)", backendplugin.EnvFDChannel, fd, typ, err)
	}
	unix.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "wcache-fd-channel")
	defer f.Close()
	c, err := fdpass.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s=%d: %w", backendplugin.EnvFDChannel, fd, err)
	}
	return fdpass.NewChannel(c), nil
}
