// Command wcache-backend-mock is the "mock" wcache backend: devices backed
// by shared-memory files. wcache starts it as a plugin; run by hand it
// only explains that. See docs/mock-backend.md.
package main

import (
	"os"

	"github.com/wcache/wcache/plugins/mock/mockbackend"
)

func main() {
	os.Exit(mockbackend.Main())
}
