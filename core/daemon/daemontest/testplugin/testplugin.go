// Package testplugin adapts an sdk.Backend that runs in the test's own
// process to the daemon's plugin interface (core/daemon.Plugin: Backend,
// Exited, ExitError, Close), with a process life the test controls: Crash
// ends it as a dying plugin process would, Close as a plugin shut down.
//
// It imports nothing of core, so that the tests of core/daemon itself use
// it as well as daemontest, which builds on it.
package testplugin

import (
	"errors"
	"io"
	"sync"

	"github.com/wcache/wcache/sdk"
)

// Plugin is an in-process backend as a daemon plugin. Create it with New.
type Plugin struct {
	b      sdk.Backend
	closer io.Closer
	exited chan struct{}
	closed chan struct{}
	once   sync.Once
	err    error
}

// New returns b as a running plugin. closer is what Close closes (the
// backend's resources, e.g. the sdk/mock.Memory under a mock.Wrap); nil
// means b itself when it is an io.Closer, else nothing.
func New(b sdk.Backend, closer io.Closer) *Plugin {
	if closer == nil {
		closer, _ = b.(io.Closer)
	}
	return &Plugin{b: b, closer: closer, exited: make(chan struct{}), closed: make(chan struct{})}
}

// Backend returns the backend given to New.
func (p *Plugin) Backend() sdk.Backend { return p.b }

// Exited is closed by Close and Crash.
func (p *Plugin) Exited() <-chan struct{} { return p.exited }

// Closed is closed by Close only (not by Crash).
func (p *Plugin) Closed() <-chan struct{} { return p.closed }

// ExitError is the reason given to Crash, "closed" after Close, nil while
// running.
func (p *Plugin) ExitError() error {
	select {
	case <-p.exited:
		return p.err
	default:
		return nil
	}
}

// Close closes the backend's closer, then marks the plugin exited and
// closed; it returns the closer's error. A plugin that crashed before is
// only closed.
func (p *Plugin) Close() error {
	var err error
	if p.closer != nil {
		err = p.closer.Close()
	}
	p.end(errors.New("closed"))
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	return err
}

// Crash simulates the plugin process dying with why: Exited closes, the
// backend is left as it is.
func (p *Plugin) Crash(why string) { p.end(errors.New(why)) }

// Die simulates the plugin process dying with why and taking its resources
// along (a real plugin's descriptors and mappings end with its process):
// the closer is closed, then Exited closes as with Crash. It returns the
// closer's error.
func (p *Plugin) Die(why string) error {
	var err error
	if p.closer != nil {
		err = p.closer.Close()
	}
	p.end(errors.New(why))
	return err
}

func (p *Plugin) end(err error) {
	p.once.Do(func() {
		p.err = err
		close(p.exited)
	})
}
