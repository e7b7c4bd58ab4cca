// Command wcache keeps model weights resident in GPU memory across engine
// restarts. See README.md and docs/.
package main

import (
	"os"

	"github.com/wcache/wcache/cmd/wcache/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
