package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/internal/version"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

func newVersionCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the wcache version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, versionLine())
			return err
		},
	}
}

// versionLine is the release and the protocol version, as `wcache version`
// and `wcache --version` print them.
func versionLine() string {
	return fmt.Sprintf("wcache %s (protocol %d)", version.Version, daemonv1.ProtocolVersion)
}
