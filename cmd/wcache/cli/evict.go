package cli

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/client"
)

func newEvictCommand(e *env) *cobra.Command {
	var (
		sel     daemonSelector
		all     bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "evict (--gpu-id N | --device-uuid UUID | --socket PATH | --all)",
		Short: "Free a daemon's weights and leave it running, empty, ready for the next publish",
		Long: `Evict drains a daemon like stop does (every attached client is told, and the
daemon waits up to --timeout for the leases to be released), then frees its
weights. The daemon keeps running, empty: the next engine start loads from
disk and publishes (a model upgrade without restarting daemons). Memory is
never freed under a live lease: if leases remain when the timeout passes, the
evict fails (exit 1) naming them and the daemon keeps serving. Evicting an
empty daemon succeeds at once.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	bf := addBackendFlags(fs)
	lf := addLayoutFlags(fs)
	sel.add(fs, "evict")
	fs.BoolVar(&all, "all", false, "evict every daemon of this user")
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
		if all {
			found, err := selectDaemons(layout, "", true)
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
		errs := make([]error, len(targets))
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, t := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg, err := evictDaemon(cmd.Context(), t, timeout)
				errs[i] = err
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					fmt.Fprintln(e.stdout, msg)
				}
			}()
		}
		wg.Wait()
		return joinCommandErrors(errs)
	}
	return cmd
}

// evictDaemon evicts one daemon.
func evictDaemon(ctx context.Context, t client.Target, timeout time.Duration) (string, error) {
	c, err := client.Dial(ctx, t, client.Options{ClientName: "wcache-evict"})
	if err != nil {
		return "", attachExit(err)
	}
	defer c.Close()
	// The RPC lasts as long as the drain; give it room beyond the timeout.
	rpcTimeout := timeout
	if rpcTimeout <= 0 {
		rpcTimeout = 30 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, rpcTimeout+15*time.Second)
	defer cancel()
	n, freed, err := c.Evict(rctx, timeout)
	if err != nil {
		return "", err
	}
	if freed == 0 && n == 0 {
		return fmt.Sprintf("daemon at %s was already empty", c.Socket()), nil
	}
	return fmt.Sprintf("evicted daemon at %s: freed %s, %d lease(s) at evict; it is empty now", c.Socket(), humanBytes(freed), n), nil
}
