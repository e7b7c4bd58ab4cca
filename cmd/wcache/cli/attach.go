package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
)

// attachSummary is what `wcache attach` prints (and its JSON form).
type attachSummary struct {
	DeviceUUID       string          `json:"device_uuid"`
	Socket           string          `json:"socket"`
	Backend          string          `json:"backend"`
	ConfigDigest     string          `json:"config_digest"`
	CheckpointDigest string          `json:"checkpoint_digest"`
	LeaseID          uint64          `json:"lease_id"`
	Generation       uint64          `json:"generation"`
	Tensors          int             `json:"tensors"`
	Bytes            uint64          `json:"bytes"`
	Handles          []attachHandle  `json:"handles"`
	TimingsMS        attachTimingsMS `json:"timings_ms"`
	Verified         bool            `json:"verified"`
}

type attachHandle struct {
	Kind string `json:"kind"`
	Size uint64 `json:"size"`
	// Data is the kind-specific handle (base64 in JSON): a file path for
	// posix-shm, a cudaIpcMemHandle for cuda-ipc.
	Data []byte `json:"data"`
}

type attachTimingsMS struct {
	Dial   float64 `json:"dial"`
	Attach float64 `json:"attach"`
	Verify float64 `json:"verify,omitempty"`
}

func newAttachCommand(e *env) *cobra.Command {
	var (
		socket         string
		uuid           string
		gpu            int
		model          string
		shardPattern   string
		jsonOut        bool
		verify         bool
		hold           time.Duration
		clientName     string
		releaseOnDrain bool
		allowOwners    []uint
		contentPolicy  string
	)
	cmd := &cobra.Command{
		Use:   "attach (--socket PATH | --device-uuid UUID | --backend NAME --gpu-id N) --model DIR",
		Short: "Attach to a daemon as an engine would, and report what it holds",
		Long: `Attach finds a daemon (an explicit socket, a device UUID, or the UUID of the
GPU a backend sees as --gpu-id), sends the CacheConfig built from the flags and
the checkpoint's header digest, and prints what came back. --verify imports
every tensor the daemon holds with the bytes on disk: posix-shm handles mapped
into this process, others imported through the backend and compared by
SHA-256, with a progress bar on a terminal (else a "verifying" log line on
stderr every 10%). --hold keeps the lease open (releasing it early when the daemon
drains, unless --release-on-drain=false).

--content says how the files under --model are proven to hold the bytes the
daemon serves (docs/cacheconfig.md, "Content identity"): identity (default) by
one stat per file, or a digest cached by an earlier hash; hash also hashes
the files it cannot prove otherwise (with progress) and caches the digests;
headers compares headers only (unsafe: a fine-tune with the base model's
shapes matches), where the daemon allows it.

Exit codes: 3 no daemon, an empty one, or files whose content could not be
proven under --content identity (the only cases in which an engine may load
from disk instead), 4 incompatible config (every differing field is listed)
or content (the first differing file is named), 1 anything else.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	cache := addCacheFlags(fs)
	bf := cache.backend
	fs.StringVar(&socket, "socket", "", "attach to the daemon at this socket path")
	fs.StringVar(&uuid, "device-uuid", "", "attach to the daemon of this device UUID")
	fs.IntVar(&gpu, "gpu-id", -1, "GPU ordinal as this process sees it (with --backend)")
	fs.StringVar(&model, "model", "", "checkpoint directory the weights must come from, or a hub id org/name[@revision] in the local Hugging Face cache")
	fs.StringVar(&shardPattern, "shard-pattern", "", "pre-sharded per-rank files inside --model")
	fs.BoolVar(&jsonOut, "json", false, "print the summary as JSON")
	fs.BoolVar(&verify, "verify", false, "read every tensor back (mapped, or through the backend) and compare it with the file")
	fs.DurationVar(&hold, "hold", 0, "keep the lease open this long before releasing it")
	fs.StringVar(&clientName, "client-name", "wcache-attach", "name shown by wcache status")
	fs.BoolVar(&releaseOnDrain, "release-on-drain", true, "with --hold, release as soon as the daemon drains")
	fs.StringVar(&contentPolicy, "content", string(cacheconfig.PolicyIdentity),
		"how to prove the files under --model hold the daemon's bytes: identity (the files the daemon loaded, "+
			"or a cached digest; else exit 3, load from disk), hash (hash files not otherwise proven, then decide), "+
			"headers (compare headers only: unsafe for fine-tunes, and only if the daemon allows it)")
	fs.UintSliceVar(&allowOwners, "allow-owner", nil,
		"also trust a socket owned by this uid (a daemon run by a service account; repeatable)")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		layout, cfg, err := cache.resolveWithModel(&model, ": the checkpoint digest names the weights")
		if err != nil {
			return err
		}
		policy, err := cacheconfig.ParsePolicy(contentPolicy)
		if err != nil {
			return withCode(ExitUsage, err)
		}
		if socket != "" && uuid != "" {
			return usageErrorf("--socket and --device-uuid exclude each other")
		}
		if uuid != "" {
			// The same mistake exits 2 here as in stop and cleanup.
			if _, err := layout.Derive(uuid); err != nil {
				return withCode(ExitUsage, err)
			}
		}
		// The backend finds the daemon when no socket or UUID is given, and
		// imports the handles for --verify.
		useBackend := socket == "" && uuid == "" || verify
		if useBackend && gpu < 0 {
			return usageErrorf("--gpu-id is required to find the daemon through --backend, and for --verify")
		}

		ck, cfg, err := openModel(model, shardPattern, cfg)
		if err != nil {
			return err
		}

		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		var backend sdk.Backend
		if useBackend {
			plugin, err := bf.start(ctx, e)
			if err != nil {
				return err
			}
			defer plugin.Close()
			backend = plugin.Backend()
		}
		var target client.Target
		switch {
		case socket != "":
			target = client.BySocket(socket)
		case uuid != "":
			target = client.ByDeviceUUID(layout, uuid)
		default:
			target = client.ByOrdinal(layout, backend, gpu)
		}

		// Under --content hash the step may hash whole files: their read
		// buffers are garbage the collector must be free to take.
		resumeGC := func() {}
		if policy != cacheconfig.PolicyHash {
			resumeGC = pauseGC()
		}
		defer resumeGC()
		begin := time.Now()
		copts := client.Options{ClientName: clientName}
		for _, u := range allowOwners {
			copts.AllowOwners = append(copts.AllowOwners, uint32(u))
		}
		c, err := client.Dial(ctx, target, copts)
		if err != nil {
			return attachExit(err)
		}
		defer c.Close()
		dialed := time.Now()
		if cfg.DeviceCapability == "" {
			if cfg.DeviceCapability, err = deviceCapability(ctx, backend, gpu, c); err != nil {
				return err
			}
		}
		files := make([]string, len(ck.Files))
		for i, f := range ck.Files {
			files[i] = f.Path
		}
		if !verify {
			// Only --verify reads the parsed headers again. Dropped here,
			// they (tens of MB at 100,000 tensors) are not live heap for
			// the collection that follows the attach step.
			ck = nil
		}
		var bar *progress
		content := client.ContentOptions{Policy: policy, Progress: func(name string, done, total int64) {
			if bar == nil {
				bar = newProgress("hashing "+name, e.stderr, progressLogger(e), isTerminal(e.stderr))
			}
			bar.update(uint64(done), uint64(total))
			if done == total {
				bar.finish()
				bar = nil
			}
		}}
		a, err := c.AttachFiles(ctx, cfg, files, content)
		attached := time.Now()
		resumeGC()
		if err != nil {
			return attachExit(err)
		}
		defer a.Lease.Close()
		m := a.Manifest
		sum := attachSummary{DeviceUUID: m.DeviceUUID, Socket: c.Socket(), Backend: m.Backend,
			ConfigDigest: m.ConfigDigest, CheckpointDigest: cfg.CheckpointDigest, LeaseID: m.LeaseID,
			Generation: m.Generation, Tensors: len(m.Tensors), Bytes: m.Bytes(), Handles: []attachHandle{},
			TimingsMS: attachTimingsMS{Dial: ms(dialed.Sub(begin)), Attach: ms(attached.Sub(dialed))}}
		for _, h := range m.Handles {
			sum.Handles = append(sum.Handles, attachHandle{Kind: h.Kind, Size: h.Size, Data: h.Data})
		}
		if verify {
			bar := newProgress("verifying", e.stderr, progressLogger(e), isTerminal(e.stderr))
			_, err := client.Verify(ctx, m, ck, client.VerifyOptions{Importer: backend, GPU: gpu, Progress: bar.update})
			bar.finish()
			if err != nil {
				return err
			}
			sum.Verified = true
			sum.TimingsMS.Verify = ms(time.Since(attached))
		}
		if err := printAttach(e.stdout, sum, jsonOut); err != nil {
			return err
		}
		if hold > 0 {
			return holdLease(ctx, e.stdout, a.Lease, hold, releaseOnDrain)
		}
		return nil
	}
	return cmd
}

// pauseGC turns the garbage collector off and returns the function that
// turns it back on with the percentage it had (GOGC's, 100 by default);
// calling that more than once is harmless. attach runs the steps it times
// (dial, attach) with the collector off. At 100,000 tensors they allocate
// ~25 MB: the []client.Tensor and the names (~13 MB) stay live until the
// summary is printed, the received message and its decoded columns become
// garbage. (Under --content hash the step may hash whole files, a leaf
// buffer per worker and file: attach does not pause the collector then.)
// A collection inside the step would mostly mark, and
// whether one starts there depends on the heap goal the checkpoint's parse
// left behind, not on the attach. The work is not skipped: the collection
// those allocations call for runs after the step, in the same process.
// debug.SetGCPercent(-1) first waits for a collection in progress to end,
// before the step's clock starts. A memory limit (GOMEMLIMIT) still holds
// while the collector is off. This is the command's policy, for its own
// short-lived process; core/client leaves its host's collector alone.
func pauseGC() (resume func()) {
	percent := debug.SetGCPercent(-1)
	paused := true
	return func() {
		if paused {
			debug.SetGCPercent(percent)
			paused = false
		}
	}
}

// openModel opens the checkpoint a config names (the whole directory
// model, or the rank's pre-sharded files inside it) and returns it with
// cfg naming it (cacheconfig.Config.WithCheckpoint), the identity `wcache
// serve --model` gives the same flags. A malformed pattern is a usage
// error.
func openModel(model, shardPattern string, cfg cacheconfig.Config) (*safetensors.Checkpoint, cacheconfig.Config, error) {
	ck, err := plan.OpenCheckpoint(model, shardPattern, plan.ShardRanks{TPRank: cfg.TPRank, TPSize: cfg.TPSize,
		PPRank: cfg.PPRank, PPSize: cfg.PPSize})
	if errors.Is(err, plan.ErrInvalidPattern) {
		return nil, cfg, withCode(ExitUsage, err)
	}
	if err != nil {
		return nil, cfg, err
	}
	return ck, cfg.WithCheckpoint(model, ck), nil
}

// deviceCapability is the capability the client side expects: the
// backend's for the GPU when there is a backend, else what the daemon
// reports (this command is a diagnostic; an engine sets its own).
func deviceCapability(ctx context.Context, b sdk.Backend, gpu int, c *client.Client) (string, error) {
	if b != nil {
		return daemon.DeviceCapability(ctx, b, gpu)
	}
	cfg, err := c.ServedConfig(ctx)
	if err != nil {
		return "", attachExit(err)
	}
	return cfg.DeviceCapability, nil
}

// attachExit maps discovery and attach errors to exit codes.
func attachExit(err error) error {
	switch {
	case errors.Is(err, client.ErrNoDaemon), errors.Is(err, client.ErrEmpty), errors.Is(err, cacheconfig.ErrContentUnknown):
		return withCode(ExitNoDaemon, err)
	case errors.Is(err, cacheconfig.ErrMismatch), errors.Is(err, cacheconfig.ErrContentMismatch),
		errors.Is(err, client.ErrPolicyRefused):
		return withCode(ExitIncompatible, err)
	}
	return err
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printAttach writes the summary.
func printAttach(w io.Writer, s attachSummary, jsonOut bool) error {
	if jsonOut {
		return json.NewEncoder(w).Encode(s)
	}
	fmt.Fprintf(w, "attached to %s via %s (backend %s, lease %d)\n", s.DeviceUUID, s.Socket, s.Backend, s.LeaseID)
	fmt.Fprintf(w, "  config digest      %s\n", s.ConfigDigest)
	fmt.Fprintf(w, "  checkpoint digest  %s\n", s.CheckpointDigest)
	fmt.Fprintf(w, "  tensors            %d (%s) in %d handle(s):", s.Tensors, humanBytes(s.Bytes), len(s.Handles))
	for _, h := range s.Handles {
		fmt.Fprintf(w, " %s %s", h.Kind, humanBytes(h.Size))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  timings            dial %.2f ms, attach %.2f ms", s.TimingsMS.Dial, s.TimingsMS.Attach)
	if s.Verified {
		fmt.Fprintf(w, ", verify %.2f ms", s.TimingsMS.Verify)
	}
	fmt.Fprintln(w)
	if s.Verified {
		fmt.Fprintf(w, "  verify             all %d tensors match the files\n", s.Tensors)
	}
	return nil
}

// holdLease keeps the lease open for d, printing notices; it returns early
// on a signal, when the lease ends (an error), or on a drain notice when
// releaseOnDrain.
func holdLease(ctx context.Context, w io.Writer, l *client.Lease, d time.Duration, releaseOnDrain bool) error {
	fmt.Fprintf(w, "holding lease %d for %s\n", l.ID(), d)
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-l.Done():
			return fmt.Errorf("lease ended while held: %w", l.Err())
		case n := <-l.Notices():
			fmt.Fprintf(w, "notice: draining: %s (deadline %s)\n", n.Message, n.Deadline.Format(time.RFC3339))
			if n.Kind == client.NoticeDraining && releaseOnDrain {
				fmt.Fprintf(w, "releasing lease %d\n", l.ID())
				return nil
			}
		}
	}
}
