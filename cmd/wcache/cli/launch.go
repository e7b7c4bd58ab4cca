package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/launcher"
	"github.com/wcache/wcache/sdk"
)

// launchFlags are the flags of `wcache launch`.
type launchFlags struct {
	backend *backendFlags
	config  *configFlags
	layout  *layoutFlags
	model   string
	// drafts are speculative-decoding draft models every daemon loads
	// beside the target (passed on as serve --draft-model).
	drafts []string
	// Passed on to serve; declared here so that launch can show them in
	// its help and derive its stop grace from the drain timeout.
	shardPattern string
	drainTimeout time.Duration

	nnodes, nodeRank     int
	baseGPUID, gpuIDStep int
	gpus                 string
	timeout, stopGrace   time.Duration
	force                bool
	takeover             bool
	replicate            bool
}

// stopGraceMargin is what the default --stop-grace adds to --drain-timeout:
// a daemon drains its leases for up to the drain timeout, then frees device
// memory and removes its files, which must not be cut short by SIGKILL.
const stopGraceMargin = 15 * time.Second

// launchOnlyFlags are the flags of launch that are not passed on to the
// daemons; launcher.OwnedServeFlags are set per daemon by the launcher.
func launchOnlyFlags() []string {
	return []string{"nnodes", "node-rank", "base-gpu-id", "gpu-id-step", "gpus", "timeout", "stop-grace", "force", "takeover", "replicate"}
}

func newLaunchCommand(e *env) *cobra.Command {
	f := &launchFlags{}
	cmd := &cobra.Command{
		Use:   "launch --backend NAME [--model DIR] --tp-size T [flags] [-- SERVE ARGS...]",
		Short: "Start one daemon per local GPU of a TP x PP layout and supervise them",
		Long: `Start one wcache daemon per local GPU of a tensor-parallel x pipeline-parallel
layout, on the GPU where the engine will run each rank (SGLang's placement:
base-gpu-id, gpu-id-step, nnodes, node-rank), or on an explicit --gpus list.

The launcher cleans stale files of every GPU, spawns the daemons, waits until
every one is ready and then supervises them. If any daemon fails before it is
ready, or --timeout passes, it stops all the others before it reports which
one failed. If a daemon exits while serving it stops the others and exits 1.
SIGTERM or SIGINT stops every daemon (grace --stop-grace, then SIGKILL).

Without --model the daemons start empty: each engine rank loads its own
shard the first time and publishes it (docs/publish.md), which suits any
checkpoint and parallel layout. With --model and a TP size above 1 the
checkpoint must be pre-sharded (--shard-pattern): a whole checkpoint on every
GPU is refused unless --replicate says a full copy per GPU is wanted.

--draft-model (also --speculative-model, vLLM's spelling, and
--speculative-draft-model-path, SGLang's) places a speculative-decoding
draft model's cache beside the target's: every daemon loads the draft whole
as a second generation, matched by its own config (model and checkpoint
digest), so each rank's engine attaches to its target slice and its draft
on the same socket.

Every flag except the launcher's own (--nnodes --node-rank --base-gpu-id
--gpu-id-step --gpus --timeout --stop-grace --force --takeover --replicate) is passed on
to each 'wcache serve', as are arguments after '--'. See docs/launcher.md.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return usageErrorf("unexpected argument %q (arguments for the daemons go after --)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLaunch(cmd, e, f, args)
		},
	}
	fs := cmd.Flags()
	f.backend = addBackendFlags(fs)
	f.config = addConfigFlags(fs)
	f.layout = addLayoutFlags(fs)
	fs.StringVar(&f.model, "model", "", "checkpoint directory every daemon loads (or a hub id org/name[@revision] in the local Hugging Face cache); empty: start empty daemons for engines to publish into")
	fs.StringArrayVar(&f.drafts, "draft-model", nil,
		"a speculative-decoding draft model every daemon loads whole beside --model's rank (a generation of its own "+
			"on each GPU; repeatable)")
	fs.StringVar(&f.shardPattern, "shard-pattern", "",
		"pre-sharded per-rank files inside --model, e.g. 'model-rank-{tp_rank}-part-*.safetensors'")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", daemon.DefaultDrainTimeout,
		"how long each daemon waits for attached clients to release their leases when stopped")
	fs.IntVar(&f.nnodes, "nnodes", 1, "nodes in the job")
	fs.IntVar(&f.nodeRank, "node-rank", 0, "this node's rank, 0 <= node-rank < nnodes")
	fs.IntVar(&f.baseGPUID, "base-gpu-id", 0, "first GPU ordinal of the layout")
	fs.IntVar(&f.gpuIDStep, "gpu-id-step", 1, "ordinal distance between consecutive TP ranks on a node")
	fs.StringVar(&f.gpus, "gpus", "", "explicit GPU ordinals, comma separated, in local rank order (pp-major, then tp); "+
		"replaces --base-gpu-id and --gpu-id-step")
	fs.DurationVar(&f.timeout, "timeout", launcher.DefaultReadyTimeout, "how long to wait for every daemon to be ready")
	fs.DurationVar(&f.stopGrace, "stop-grace", 0,
		"how long stopping daemons may take after SIGTERM before SIGKILL (default --drain-timeout + 15s)")
	fs.BoolVar(&f.force, "force", false, "terminate live daemons found on the GPUs and take over")
	fs.BoolVar(&f.takeover, "takeover", false,
		"start every daemon with serve --takeover: live daemons hand their memory over without a reload (a rolling upgrade); "+
			"their launcher then waits for SIGTERM")
	fs.BoolVar(&f.replicate, "replicate", false,
		"with --tp-size above 1 and no --shard-pattern, load the whole checkpoint on every GPU (a full copy per GPU)")
	return cmd
}

// topology builds the launcher topology from the flags.
func (f *launchFlags) topology(fs *pflag.FlagSet, tp, pp uint32) (launcher.Topology, error) {
	t := launcher.Topology{
		TPSize: int(tp), PPSize: int(pp),
		NNodes: f.nnodes, NodeRank: f.nodeRank,
		BaseGPUID: f.baseGPUID, GPUIDStep: f.gpuIDStep,
	}
	if fs.Changed("gpus") {
		if fs.Changed("base-gpu-id") || fs.Changed("gpu-id-step") {
			return t, usageErrorf("--gpus replaces --base-gpu-id and --gpu-id-step; give one or the other")
		}
		gpus, err := launcher.ParseGPUList(f.gpus)
		if err != nil {
			return t, withCode(ExitUsage, fmt.Errorf("--gpus %q: %w", f.gpus, err))
		}
		t.GPUs = gpus
	}
	return t, nil
}

// serveArgs are the flags passed on to every daemon: each flag given to
// launch, except the launcher's own and those it sets per daemon, in
// --name=value form (a repeatable flag once per value), then extra.
func serveArgs(fs *pflag.FlagSet, extra []string) []string {
	skip := append(launchOnlyFlags(), launcher.OwnedServeFlags()...)
	var args []string
	fs.Visit(func(fl *pflag.Flag) {
		if slices.Contains(skip, fl.Name) {
			return
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				args = append(args, "--"+fl.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+fl.Name+"="+fl.Value.String())
	})
	return append(args, extra...)
}

func runLaunch(cmd *cobra.Command, e *env, f *launchFlags, extra []string) error {
	fs := cmd.Flags()
	for _, name := range []string{"tp-rank", "pp-rank"} {
		if fs.Changed(name) {
			return usageErrorf("--%s is assigned by the launcher to each daemon; give --tp-size/--pp-size only", name)
		}
	}
	cfg, err := f.config.config()
	if err != nil {
		return err
	}
	// Templates first: one without {device_uuid} fails before anything is
	// started or touched.
	layout, err := f.layout.layout()
	if err != nil {
		return err
	}
	topo, err := f.topology(fs, cfg.TPSize, cfg.PPSize)
	if err != nil {
		return err
	}
	ranks, err := launcher.Place(topo)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	if f.model, err = resolveModel(f.model); err != nil {
		return err
	}
	if f.model != "" {
		if st, err := os.Stat(f.model); err != nil {
			return usageErrorf("--model: not a checkpoint directory: %v", err)
		} else if !st.IsDir() {
			return usageErrorf("--model %s: not a checkpoint directory", f.model)
		}
		if err := f.checkReplication(cfg.TPSize); err != nil {
			return err
		}
	} else if f.shardPattern != "" || f.replicate {
		return usageErrorf("--shard-pattern and --replicate need --model (without it the daemons start empty)")
	}
	if len(f.drafts) > 0 && f.model == "" {
		return usageErrorf("--draft-model needs --model (the target it drafts for); without --model engines publish their draft themselves")
	}
	for _, d := range f.drafts {
		dir, err := resolveModel(d)
		if err != nil {
			return err
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return usageErrorf("--draft-model %s: not a checkpoint directory", d)
		}
	}
	if f.force && f.takeover {
		return usageErrorf("--force and --takeover exclude each other: --force stops live daemons and reloads, --takeover keeps their memory")
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// A supervisor must not die because whoever reads its output went away
	// (a closed terminal, a killed `| tee`): its death would take every
	// daemon with it. Writes to a broken stderr fail quietly instead.
	signal.Ignore(syscall.SIGPIPE)
	logf := func(format string, args ...any) {
		fmt.Fprintf(e.stderr, "wcache launch: "+format+"\n", args...)
	}

	// One plugin for the whole launch, only to resolve UUIDs; closed before
	// the daemons start their own.
	devices, err := f.resolveDevices(ctx, e, ranks)
	if errors.Is(err, sdk.ErrNoSuchDevice) {
		return withCode(ExitUsage, fmt.Errorf("the layout needs more GPUs than the backend has: %w", err))
	}
	if err != nil {
		return err
	}

	if !fs.Changed("stop-grace") {
		f.stopGrace = f.drainTimeout + stopGraceMargin
	}
	passOn := serveArgs(fs, extra)
	logf("starting %d daemons: wcache serve --gpu-id G --tp-size %d --tp-rank R --pp-size %d --pp-rank P %s",
		len(ranks), topo.TPSize, topo.PPSize, quoteArgs(passOn))
	begin := time.Now()
	g, err := launcher.Launch(ctx, launcher.Options{
		Topology:     topo,
		Devices:      devices,
		Layout:       layout,
		ServeArgs:    passOn,
		Force:        f.force,
		Takeover:     f.takeover,
		ReadyTimeout: f.timeout,
		StopGrace:    f.stopGrace,
		Output:       e.stderr,
		Logf:         logf,
	})
	if err != nil {
		return fmt.Errorf("launch failed: %w", err)
	}
	printDaemons(e, g.Daemons(), f.backend.backendName(), f.model, time.Since(begin))
	logf("supervising %d daemons; SIGTERM or Ctrl-C stops them all", len(ranks))
	if err := g.Supervise(ctx); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if g.HandedOver() {
		logf("all %d daemons run on under their successors; exiting", len(ranks))
		return nil
	}
	logf("all %d daemons stopped cleanly", len(ranks))
	return nil
}

// checkReplication refuses to load a whole checkpoint on each of tp > 1
// GPUs unless --replicate: tensor parallelism wants each rank's slice, and a
// silent full copy per GPU wastes (tp-1)/tp of the memory.
func (f *launchFlags) checkReplication(tp uint32) error {
	if tp <= 1 || f.shardPattern != "" || f.replicate {
		return nil
	}
	return usageErrorf("--tp-size %d with --model %s and no --shard-pattern would load the WHOLE checkpoint on every "+
		"one of the %d GPUs. Either start empty daemons (omit --model) and let each engine rank publish its own "+
		"shard (docs/publish.md), or point --shard-pattern at a pre-sharded checkpoint "+
		"(e.g. 'model-rank-{tp_rank}-part-*.safetensors'); pass --replicate if a full copy per GPU is really wanted",
		tp, f.model, tp)
}

// resolveDevices starts the backend plugin once and maps every GPU of the
// layout to its UUID.
func (f *launchFlags) resolveDevices(ctx context.Context, e *env, ranks []launcher.Rank) (launcher.DeviceMap, error) {
	plugin, err := f.backend.start(ctx, e)
	if err != nil {
		return nil, err
	}
	defer plugin.Close()
	return launcher.ResolveDevices(ctx, plugin.Backend(), ranks)
}

// printDaemons prints one line per ready daemon.
func printDaemons(e *env, ds []launcher.Daemon, backend, model string, took time.Duration) {
	if model == "" {
		model = "none: empty, waiting for publishes"
	}
	fmt.Fprintf(e.stdout, "%d daemons ready in %s (backend %s, model %s)\n",
		len(ds), took.Round(time.Millisecond), backend, model)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tTP\tPP\tDEVICE UUID\tPID\tREADY IN\tSOCKET")
	for _, d := range ds {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%s\t%s\n", d.Rank.GPUID, d.Rank.TPRank, d.Rank.PPRank,
			d.DeviceUUID, d.PID, d.ReadyAfter.Round(time.Millisecond), d.Paths.Socket)
	}
	tw.Flush()
}

// quoteArgs renders args for a log line.
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t\"'") {
			a = fmt.Sprintf("%q", a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
