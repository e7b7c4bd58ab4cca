// Command wcache-backend-mock is the "mock" wcache backend: devices backed
// by shared-memory files. wcache starts it as a plugin; run by hand it
// only explains that. See docs/mock-backend.md.
package main

import (
	"os"
	"runtime"

	"github.com/wcache/wcache/plugins/mock/mockbackend"
)

// init locks the main goroutine to the main thread: the parent-death
// signal the host sets is an attribute of that thread, and
// mockbackend.Main can replace it (SIGKILL → SIGTERM, so files get removed)
// only from there.
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(mockbackend.Main())
}
