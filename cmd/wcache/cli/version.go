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
			_, err := fmt.Fprintf(e.stdout, "wcache %s (protocol %d)\n", version.Version, daemonv1.ProtocolVersion)
			return err
		},
	}
}
