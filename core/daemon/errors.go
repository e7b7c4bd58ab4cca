package daemon

import (
	"errors"
	"fmt"
	"strings"
)

// ErrPluginExited: the backend plugin process exited while the daemon was
// loading or serving. Its device memory is gone with it.
var ErrPluginExited = errors.New("backend plugin exited")

// DrainTimeoutError: a Stop without force waited DrainTimeout and leases
// were still attached; the daemon keeps serving.
type DrainTimeoutError struct {
	Timeout string
	Leases  []LeaseInfo
}

func (e *DrainTimeoutError) Error() string {
	parts := make([]string, len(e.Leases))
	for i, l := range e.Leases {
		parts[i] = l.String()
	}
	return fmt.Sprintf("drain timed out after %s with %d live lease(s): %s; the daemon keeps serving (stop with force to end them)",
		e.Timeout, len(e.Leases), strings.Join(parts, ", "))
}
