package daemontest

import (
	"errors"
	"io"
	"sync"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/sdk"
)

// Plugin is an in-process backend as a daemon.Plugin: no process, but an
// exit the test controls. Create it with NewPlugin.
type Plugin struct {
	b      sdk.Backend
	exited chan struct{}
	once   sync.Once
	err    error
}

var _ daemon.Plugin = (*Plugin)(nil)

// NewPlugin returns b as a running plugin.
func NewPlugin(b sdk.Backend) *Plugin {
	return &Plugin{b: b, exited: make(chan struct{})}
}

// Backend returns the backend given to NewPlugin.
func (p *Plugin) Backend() sdk.Backend { return p.b }

// Exited is closed by Close and Crash.
func (p *Plugin) Exited() <-chan struct{} { return p.exited }

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

// Close marks the plugin exited and closes the backend when it is an
// io.Closer (as sdk/mock.Memory is), returning that error.
func (p *Plugin) Close() error {
	p.end(errors.New("closed"))
	if c, ok := p.b.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Crash simulates the plugin process dying with why: Exited closes, the
// backend is left as it is.
func (p *Plugin) Crash(why string) { p.end(errors.New(why)) }

func (p *Plugin) end(err error) {
	p.once.Do(func() {
		p.err = err
		close(p.exited)
	})
}
