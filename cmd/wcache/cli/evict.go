package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonctl"
)

func newEvictCommand(e *env) *cobra.Command {
	var (
		sel     daemonSelector
		all     bool
		which   client.EvictSelector
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "evict (--gpu-id N | --device-uuid UUID | --socket PATH | --all) [--model M | --config-digest D | --generation N | --all-generations]",
		Short: "Free a daemon's weights (one generation, or all) and leave it running, ready for the next publish",
		Long: `Evict drains a daemon like stop does (every attached client is told, and the
daemon waits up to --timeout for the leases to be released), then frees its
weights. The daemon keeps running, empty: the next engine start loads from
disk and publishes (a model upgrade without restarting daemons). Memory is
never freed under a live lease: if leases remain when the timeout passes, the
evict fails (exit 1) naming them and the daemon keeps serving. Evicting an
empty daemon succeeds at once.

A daemon may hold several generations (a target and a draft model, several
models: wcache status lists them). --model, --config-digest and --generation
name the ones to free (each given one must match), --all-generations frees
every one; only their leases are drained, the others serve on. Naming none
evicts the daemon's only generation, and is refused when it holds several.
--all (every daemon) frees every generation of each.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	bf := addBackendFlags(fs)
	lf := addLayoutFlags(fs)
	sel.add(fs, "evict")
	fs.BoolVar(&all, "all", false, "evict every daemon of this user (every generation of each)")
	fs.StringVar(&which.Model, "model", "", "evict the generations of this model (its directory, or the config's model id)")
	fs.StringVar(&which.ConfigDigest, "config-digest", "", "evict the generation with this config digest (wcache status shows it)")
	fs.Uint64Var(&which.Generation, "generation", 0, "evict the generation with this id (wcache status shows it)")
	fs.BoolVar(&which.All, "all-generations", false, "evict every generation of the daemon")
	fs.DurationVar(&timeout, "timeout", 0, "how long to wait for leases (0: the daemon's drain timeout, 30s by default)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		layout, err := lf.layout()
		if err != nil {
			return err
		}
		if all == sel.set() {
			return usageErrorf("name a daemon with --gpu-id, --device-uuid or --socket, or pass --all")
		}
		var targets []client.Target
		named := which.Model != "" || which.ConfigDigest != "" || which.Generation != 0
		if which.All && named {
			return usageErrorf("--all-generations frees every generation: drop --model, --config-digest and --generation")
		}
		if st, err := os.Stat(which.Model); which.Model != "" && err == nil && st.IsDir() {
			// A directory names the generation loaded from it: the daemon
			// records absolute paths.
			if abs, err := filepath.Abs(which.Model); err == nil {
				which.Model = abs
			}
		}
		if all {
			which.All = true
			found, err := selectDaemons(layout, "", true, daemonctl.Find)
			if err != nil {
				return err
			}
			for _, f := range found {
				targets = append(targets, client.BySocket(f.Paths.Socket))
			}
		} else {
			t, _, closeTarget, err := sel.target(cmd.Context(), e, bf, layout)
			if err != nil {
				return err
			}
			defer closeTarget()
			targets = []client.Target{t}
		}
		return forEachDaemon(e.stdout, targets, func(t client.Target) (string, error) {
			return evictDaemon(cmd.Context(), t, which, timeout)
		})
	}
	return cmd
}

// evictDaemon evicts one daemon.
func evictDaemon(ctx context.Context, t client.Target, which client.EvictSelector, timeout time.Duration) (string, error) {
	ev, err := daemonctl.EvictSelected(ctx, t, "wcache-evict", which, timeout)
	if err != nil {
		// Only the dial's errors match attachExit's sentinels.
		return "", attachExit(err)
	}
	if ev.Freed == 0 && ev.Leases == 0 {
		return fmt.Sprintf("daemon at %s was already empty", ev.Socket), nil
	}
	if ev.Left > 0 {
		return fmt.Sprintf("evicted generation(s) %v of the daemon at %s: freed %s, %d lease(s) at evict; %d generation(s) left",
			ev.Generations, ev.Socket, humanBytes(ev.Freed), ev.Leases, ev.Left), nil
	}
	return fmt.Sprintf("evicted daemon at %s: freed %s, %d lease(s) at evict; it is empty now", ev.Socket, humanBytes(ev.Freed), ev.Leases), nil
}
