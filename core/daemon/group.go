package daemon

import (
	"fmt"
	"os/user"
	"strconv"
)

// LookupGroup resolves a group name or a numeric gid, for Options.SocketGID.
func LookupGroup(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("socket group: %w", err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("socket group %s: gid %q: %w", name, g.Gid, err)
	}
	return uint32(n), nil
}
