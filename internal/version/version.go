// Package version holds the wcache release and protocol versions.
package version

// Version is the wcache release. Overridden at link time with
// -ldflags "-X github.com/wcache/wcache/internal/version.Version=…".
var Version = "0.1.0-dev"

// ProtocolVersion is the version of the daemon protocol (wcache.daemon.v1)
// this build speaks. It is part of CacheConfig.
const ProtocolVersion = 1

// BackendAPIVersion is the application-level API version checked in the
// go-plugin handshake between the core and a backend plugin.
const BackendAPIVersion = 1
