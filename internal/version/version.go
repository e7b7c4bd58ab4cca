// Package version holds the wcache release string. It is a leaf: it imports
// nothing, so every binary, public package and third-party tool may name it.
//
// The protocol versions live beside what they version: the daemon protocol's
// in proto/wcache/daemon/v1 (daemonv1.ProtocolVersion), the backend plugin
// API's in sdk (sdk.APIVersion).
package version

// Version is the wcache release, "0.1.0-dev" unless set at link time:
//
//	go build -ldflags "-X github.com/wcache/wcache/internal/version.Version=1.2.3" ./cmd/wcache
//
// It is a variable only so that the linker can set it; nothing assigns it
// at run time.
var Version = "0.1.0-dev"
