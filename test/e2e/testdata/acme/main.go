// Command wcache-backend-acme is the test plugin of an outside vendor,
// "acme": a separate Go module that imports only github.com/wcache/wcache/sdk
// and its subpackages (sdk/plugin to serve, sdk/mock for its memory), as a separately released plugin would. It
// declares
//
//   - a vendor handle kind, x-acme-buf: Data is "acme-buf:v1:" followed by
//     the path of the allocation's file (the "device buffer"); a client maps
//     it with the vendor's mapper, registered in the client's registry;
//   - a configuration schema (devices, memory, dir, uuid-tag), each option
//     with an ACME_* variable as fallback;
//   - two backend API versions, 1 and 2 (the host picks the newest both
//     speak; version 1 has no Configure).
//
// test/e2e builds it with `go build` in this folder (its own go.mod,
// with a replace directive to the repository) and runs the conformance
// suite and a daemon end to end through it.
package main

import (
	"os"
	"runtime"

	"github.com/wcache/wcache/sdk/plugin"
)

// init locks main to the main thread, where plugin.Serve can replace the
// host's parent-death signal (WithCloseOnTermination: the files go on
// SIGTERM).
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(plugin.Serve("acme", newBackend,
		plugin.WithSchema(options()),
		plugin.WithDoc("test/e2e/testdata/acme/main.go"),
		plugin.WithCloseOnTermination(),
		plugin.WithAPIVersions(1, 2)))
}
