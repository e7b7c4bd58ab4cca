package daemontest

import (
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/daemon/daemontest/testplugin"
	"github.com/wcache/wcache/sdk"
)

// Plugin is an in-process backend as a daemon.Plugin: no process, but an
// exit the test controls (Crash). See package testplugin.
type Plugin = testplugin.Plugin

var _ daemon.Plugin = (*Plugin)(nil)

// NewPlugin returns b as a running plugin; Close closes b when it is an
// io.Closer (as sdk/mock.Memory is).
func NewPlugin(b sdk.Backend) *Plugin { return testplugin.New(b, nil) }
