package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/daemonctl"
	"github.com/wcache/wcache/core/daemonfile"
)

func newCleanupCommand(e *env) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "cleanup (--device-uuid UUID | --all)",
		Short: "Remove the files of daemons that died; with --force, terminate live ones too",
		Long: `Cleanup makes a device's discovery files consistent: nothing there, nothing
to do; a dead, zombie or reused-pid daemon's socket and ready file are
removed; a live daemon is refused (exit 1) unless --force, which terminates it
(SIGTERM, grace, SIGKILL) and removes its files. Lock files stay in place.
Files of the old rank-keyed layout are not touched (see docs/operations.md).`,
		Args: cobra.NoArgs,
	}
	df := addDevicesFlags(cmd.Flags(), "clean the files of this device", "clean the files of every device of this user")
	cmd.Flags().BoolVar(&force, "force", false, "terminate a live daemon instead of refusing")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		// --all also finds the devices that left only a lock file behind.
		targets, err := df.targets(daemonctl.FindWithLocks)
		if err != nil {
			return err
		}
		var errs []error
		for _, t := range targets {
			res, err := daemonfile.Cleanup(cmd.Context(), t.Paths, daemonfile.CleanupOptions{Force: force})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintln(e.stdout, describeCleanup(t.UUID, res))
		}
		return joinCommandErrors(errs)
	}
	return cmd
}

// describeCleanup says what Cleanup did.
func describeCleanup(uuid string, r daemonfile.CleanupResult) string {
	switch r.Action {
	case daemonfile.ActionRemovedStale:
		return fmt.Sprintf("%s: removed stale files of dead daemon pid %d: %s", uuid, r.PID, strings.Join(r.Removed, ", "))
	case daemonfile.ActionTookOver:
		return fmt.Sprintf("%s: terminated live daemon pid %d and removed %s", uuid, r.PID, strings.Join(r.Removed, ", "))
	default:
		return fmt.Sprintf("%s: nothing to clean", uuid)
	}
}
