package cli

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/daemon/metrics"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
)

func newServeCommand(e *env) *cobra.Command {
	var (
		gpu          int
		models       []string
		drafts       []string
		shardPattern string
		force        bool
		takeover     bool
		verifyLoad   bool
		drainTimeout time.Duration
		allowUIDs    []uint
		allowGIDs    []uint
		socketGroup  string
		maxArena     uint64
		maxBytes     string
		reserveBytes string
		hugePages    bool
		logLevel     string
		logFormat    string
		metricsAddr  string
		metricsAny   bool
		peerFill     string
		publish      publishFlags
		peers        peerFlags
		// contentPolicies are the content policies clients may use.
		contentPolicies []string
	)
	cmd := &cobra.Command{
		Use:   "serve --backend NAME --gpu-id N [--model DIR]...",
		Short: "Run the daemon of one GPU: load the weights once, serve attaches until stopped",
		Long: `Serve runs the wcache daemon of one GPU. It resolves the GPU's UUID through
the backend plugin, takes the device's identity lock (refusing a live daemon
unless --force), loads the checkpoint into a few large device allocations,
listens on the device's socket and writes its ready file. It serves until
wcache stop, SIGTERM, SIGINT or SIGHUP (which drain leases for --drain-timeout, then
stop anyway). If the backend plugin dies and its handles are descriptors
(memfd, cuda-vmm-fd), serve starts a new plugin that imports the daemon's
descriptors and serves on without reading the disk; with name handles
(cuda-ipc, posix-shm) it removes its files and exits 1.
SIGPIPE is ignored: a daemon whose output nobody reads any more still stops
cleanly.

While it loads, serve shows a progress bar with rate and ETA when stderr is
a terminal; otherwise (a pipe, a journal, or --log-format json) it logs a
"loading" line every 10% with percent, bytes, total, rate and eta.

Without --model the daemon starts empty: attaches are answered "empty" (the
engine loads from disk) until a client publishes its own weights (wcache
publish, or an engine through the client libraries; see docs/publish.md).
wcache evict empties it again.

--model may be repeated (and --draft-model adds a speculative-decoding draft
model the same way): each checkpoint becomes a generation of its own, with
its own config, arenas and leases, and an attach gets the one whose config
matches. Their sum must fit --max-bytes and the device's free memory less
--reserve-bytes, or nothing is loaded. --shard-pattern applies to the first
--model only; the CacheConfig flags apply to every model, each with its own
model path and checkpoint digest.

Before reading the files, a load asks a sibling daemon of the same user on
this node whose GPU already holds the same weights (same weights identity,
docs/peer-fill.md) and copies them device to device; the files are read when
none does, or when the copy or its check fails (the log and wcache status
say why). --peer-fill=off always reads the files.

Across nodes: --peer-listen HOST:PORT serves this daemon's weights to other
nodes' daemons, and --peers HOST:PORT,... (or one name resolving to many) makes
a load ask them after the node's siblings; both over mutual TLS with
--peer-cert, --peer-key and --peer-ca (certificate files as cert-manager or
spiffe-helper write them), --peer-allow narrowing the accepted names and
--peer-rate bounding what the endpoint sends. The fetched bytes are checked
against the peer's content digests, and against the files' when they are
known (the digest cache, hub blob names); memfd backends only for now.

With --metrics-listen, serve also answers GET /metrics (Prometheus) and
GET /healthz (200 "serving", 503 otherwise) on a Unix socket (unix:/path,
mode 0600) or a loopback TCP address, from the moment it is ready until it
has stopped.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	cache := addCacheFlags(fs)
	bf := cache.backend
	fs.IntVar(&gpu, "gpu-id", -1, "GPU ordinal as this process sees it (CUDA_VISIBLE_DEVICES applies)")
	fs.StringArrayVar(&models, "model", nil, "checkpoint directory (safetensors), or a hub id org/name[@revision] in the local Hugging Face cache "+
		"(an id even when ./org/name exists: write ./org/name for that directory); "+
		"repeat for several models (one generation each); none: start empty and wait for a publish")
	fs.StringArrayVar(&drafts, "draft-model", nil, "a speculative-decoding draft model loaded beside --model as a generation of its own "+
		"(same forms as --model; repeatable)")
	publish.add(fs)
	fs.StringVar(&shardPattern, "shard-pattern", "",
		"pre-sharded per-rank files inside --model, e.g. 'model-rank-{tp_rank}-part-*.safetensors'")
	fs.BoolVar(&force, "force", false, "terminate a live daemon of the same GPU and take over (reloading the weights)")
	fs.BoolVar(&takeover, "takeover", false,
		"receive the memory of a live daemon of the same GPU over its descriptor channel and serve the same "+
			"generation without reloading (descriptor handles only, e.g. the mock's memfd); it then exits")
	fs.StringSliceVar(&contentPolicies, "content-policies", cacheconfig.PolicyStrings(cacheconfig.DefaultDaemonPolicies),
		"content policies clients may use (identity, hash, headers): without headers an attach must prove the files it "+
			"would load (one that names none is refused); add headers to also answer attaches on headers alone (unsafe for fine-tunes)")
	fs.StringVar(&peerFill, "peer-fill", daemon.PeerFillAuto,
		"auto: fill from a daemon that already holds the same weights (a sibling GPU on this node) before reading "+
			"the files, falling back to the files; off: always read the files")
	fs.BoolVar(&verifyLoad, "verify", false,
		"after the load, compare the SHA-256 of every file's bytes in device memory with the file (reads the checkpoint twice)")
	fs.DurationVar(&drainTimeout, "drain-timeout", daemon.DefaultDrainTimeout,
		"how long a stop (or SIGTERM) waits for attached clients to release their leases")
	fs.UintSliceVar(&allowUIDs, "allow-uid", nil, "also accept clients running as this uid, as guests: status and attach, never stop, evict or publish (repeatable)")
	fs.UintSliceVar(&allowGIDs, "allow-gid", nil, "also accept clients whose primary gid is this, as guests (see --allow-uid; repeatable)")
	fs.StringVar(&socketGroup, "socket-group", "",
		"make the socket group-owned by this group (name or gid) with mode 0660, for clients of other users "+
			"(they must also pass --allow-uid/--allow-gid)")
	fs.Uint64Var(&maxArena, "max-arena-bytes", plan.DefaultMaxArenaBytes, "largest single device allocation")
	fs.StringVar(&maxBytes, "max-bytes", "",
		"cap on the device memory the daemon may hold, every generation summed (e.g. 40GiB, or 80% of the device's "+
			"memory); a load or publish past it is refused before anything is allocated (RESOURCE_EXHAUSTED); empty: no cap "+
			"but the device's free memory")
	fs.StringVar(&reserveBytes, "reserve-bytes", "",
		"device memory a load or publish must leave free (e.g. 2GiB), when the backend reports free memory; empty: 0")
	fs.BoolVar(&hugePages, "huge-pages", false, "align each file's data to 2 MiB instead of 4 KiB")
	fs.StringVar(&logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text",
		"text (with a progress bar while loading when stderr is a terminal) or json (one JSON object per line, no bar)")
	fs.StringVar(&metricsAddr, "metrics-listen", "",
		"serve GET /metrics and /healthz on unix:/path (a 0600 socket) or host:port (loopback only, "+
			"unless --metrics-allow-remote); empty: no metrics endpoint")
	peers.register(fs)
	fs.BoolVar(&metricsAny, "metrics-allow-remote", false,
		"let --metrics-listen use a non-loopback TCP address (the endpoint has no authentication)")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		// Everything that can be checked without touching the system is
		// checked first: a bad template or flag creates no file.
		layout, cfg, err := cache.resolve()
		if err != nil {
			return err
		}
		if gpu < 0 {
			return usageErrorf("--gpu-id is required")
		}
		if len(models) == 0 && shardPattern != "" {
			return usageErrorf("--shard-pattern needs --model")
		}
		if len(models) == 0 && len(drafts) > 0 {
			return usageErrorf("--draft-model needs --model (the target it drafts for)")
		}
		models = append(slices.Clone(models), drafts...)
		for i, m := range models {
			if m == "" {
				return usageErrorf("--model \"\": want a checkpoint directory or a hub id")
			}
			if models[i], err = resolveModel(m); err != nil {
				return err
			}
		}
		model := ""
		var more []daemon.Source
		for i, m := range models {
			if i == 0 {
				model = m
				continue
			}
			// The same flags, but the model's own path as its model field.
			c := cfg
			c.Model = ""
			more = append(more, daemon.Source{Model: m, Config: c})
		}
		level := hclog.LevelFromString(logLevel)
		if level == hclog.NoLevel {
			return usageErrorf("--log-level %q: want trace, debug, info, warn or error", logLevel)
		}
		if logFormat != "text" && logFormat != "json" {
			return usageErrorf("--log-format %q: want text or json", logFormat)
		}
		var policies []cacheconfig.Policy
		for _, p := range contentPolicies {
			policy, err := cacheconfig.ParsePolicy(p)
			if err != nil || p == "" {
				return usageErrorf("--content-policies: %q: want identity, hash or headers", p)
			}
			policies = append(policies, policy)
		}
		if peerFill != daemon.PeerFillAuto && peerFill != daemon.PeerFillOff {
			return usageErrorf("--peer-fill %q: want auto or off", peerFill)
		}
		metricsAt, err := metricsListenAddr(metricsAddr, metricsAny)
		if err != nil {
			return err
		}
		log := hclog.New(&hclog.LoggerOptions{Name: "wcache", Level: level, Output: e.stderr, JSONFormat: logFormat == "json"})
		var capBytes, reserve uint64
		var capFraction float64
		if pct, ok := strings.CutSuffix(maxBytes, "%"); ok {
			f, err := strconv.ParseFloat(pct, 64)
			if err != nil || f <= 0 || f > 100 {
				return usageErrorf("--max-bytes %q: want a percentage above 0 and at most 100 such as 80%%", maxBytes)
			}
			capFraction = f / 100
		} else if maxBytes != "" {
			if capBytes, err = sdk.ParseSize(maxBytes); err != nil || capBytes == 0 {
				return usageErrorf("--max-bytes %q: want a size above 0 such as 40GiB, or a percentage of the device's memory such as 80%%", maxBytes)
			}
		}
		if reserveBytes != "" {
			if reserve, err = sdk.ParseSize(reserveBytes); err != nil {
				return usageErrorf("--reserve-bytes: %v", err)
			}
		}
		opts := daemon.Options{GPU: gpu, MaxBytes: capBytes, MaxFraction: capFraction, ReserveBytes: reserve, Model: model, Models: more, ShardPattern: shardPattern, Config: cfg, Layout: layout,
			Plan: plan.Options{MaxArenaBytes: maxArena}, Force: force, Takeover: takeover, DrainTimeout: drainTimeout, Logger: log,
			VerifyPublish: publish.verify, PublishTimeout: publish.timeout, VerifyLoad: verifyLoad, KeepLayout: cache.config.layoutGiven(),
			ContentPolicies: policies, PeerFill: peerFill}
		if err := peers.apply(&opts); err != nil {
			return err
		}
		if peerFill != daemon.PeerFillOff {
			opts.DigestCache, _ = client.DefaultDigestCache() // none without a home: peer fills hash the local files
		}
		if hugePages {
			opts.Plan.FileAlignment = plan.HugePageAlignment
		}
		for _, u := range allowUIDs {
			opts.AllowUIDs = append(opts.AllowUIDs, uint32(u))
		}
		for _, g := range allowGIDs {
			opts.AllowGIDs = append(opts.AllowGIDs, uint32(g))
		}
		if socketGroup != "" {
			gid, err := daemon.LookupGroup(socketGroup)
			if err != nil {
				return withCode(ExitUsage, fmt.Errorf("--socket-group: %w", err))
			}
			opts.SocketGID = &gid
		}
		var endpoint *metrics.Endpoint
		if metricsAt != nil {
			endpoint = metrics.NewEndpoint(*metricsAt, log)
			opts.Metrics = endpoint.Metrics
		}

		// SIGHUP (a closed terminal, logind) drains like SIGTERM: a daemon
		// has no configuration to reload, and dying without a drain would
		// leave stale files and cut its leases off.
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		defer stop()
		// A daemon must outlive whoever reads its output: under a launcher
		// killed with SIGKILL, stderr is a pipe without a reader, and the
		// parent-death SIGTERM starts a drain whose first log line would
		// raise SIGPIPE and kill the daemon before it removes its socket and
		// ready file. Ignored, the write fails with EPIPE and is dropped.
		signal.Ignore(syscall.SIGPIPE)
		// SIGUSR1 reads the peer credentials again (peerreload.go).
		defer watchPeerReload(opts.Peer.Creds, log)()

		plugin, err := bf.startPlugin(ctx, log, nil)
		if err != nil {
			return err
		}
		// With descriptor handles a dead plugin is replaced, not fatal —
		// by the very file that was started (or one --plugin-sha256 pins):
		// a binary replaced since is refused.
		first := plugin.Binary()
		opts.RestartPlugin = func(ctx context.Context) (daemon.Plugin, error) { return bf.startPlugin(ctx, log, &first) }
		bar := newProgress("loading", e.stderr, log, logFormat == "text" && isTerminal(e.stderr))
		opts.Progress = bar.update
		d, err := daemon.Start(ctx, plugin, opts)
		bar.finish()
		if err != nil {
			return err
		}
		var metricsListen string
		if endpoint != nil {
			if metricsListen, err = endpoint.Listen(d); err != nil {
				return err
			}
		}
		info := d.Info()
		switch {
		case info.Load.Source == daemon.SourceTakeover:
			fmt.Fprintf(e.stdout, "serving %s (%s) on %s: %d tensors, %s in %d allocation(s), taken over in %s (nothing loaded)\n",
				info.DeviceUUID, info.Backend, info.Paths.Socket, info.Tensors, humanBytes(info.Load.Bytes),
				info.Load.Allocations, info.StartDuration.Round(time.Millisecond))
		case strings.HasPrefix(info.Load.FilledFrom, "peer "):
			fmt.Fprintf(e.stdout, "serving %s (%s) on %s: %d tensors, %s in %d allocation(s), filled from a peer in %s (%s/s)\n",
				info.DeviceUUID, info.Backend, info.Paths.Socket, info.Tensors, humanBytes(info.Load.Bytes),
				info.Load.Allocations, info.Load.Duration.Round(time.Millisecond), humanBytes(uint64(info.Load.BytesPerSecond())))
		case model == "":
			fmt.Fprintf(e.stdout, "serving %s (%s) on %s: empty, waiting for a publish\n",
				info.DeviceUUID, info.Backend, info.Paths.Socket)
		default:
			how := "loaded"
			if info.Load.FromPeer > 0 {
				how = "filled from " + info.Load.FilledFrom
			}
			fmt.Fprintf(e.stdout, "serving %s (%s) on %s: %d tensors, %s in %d allocation(s), %s in %s (%s/s)\n",
				info.DeviceUUID, info.Backend, info.Paths.Socket, info.Tensors, humanBytes(info.Load.Bytes),
				info.Load.Allocations, how, info.Load.Duration.Round(time.Millisecond), humanBytes(uint64(info.Load.BytesPerSecond())))
		}
		if len(info.Generations) > 1 {
			for _, g := range info.Generations {
				fmt.Fprintf(e.stdout, "  generation %d: %s (%s), %d tensors, %s on the device\n",
					g.ID, g.Model, g.ConfigDigest, g.Tensors, humanBytes(g.DeviceBytes))
			}
		}
		if info.Cleanup.Action != "" && info.Cleanup.Action != "none" {
			log.Info("before starting", "action", info.Cleanup.Action, "pid", info.Cleanup.PID,
				"removed", strings.Join(info.Cleanup.Removed, ","))
		}
		if endpoint == nil {
			return d.Run(ctx)
		}
		log.Info("metrics endpoint", "addr", metricsListen)
		return endpoint.Run(ctx, d)
	}
	return cmd
}

// metricsListenAddr checks --metrics-listen and --metrics-allow-remote; nil
// without --metrics-listen. A non-loopback TCP address without
// --metrics-allow-remote, or a malformed one, is a usage error; a Unix
// socket whose directory is missing, or with a file in its way, fails
// (exit 1) before the daemon loads anything.
func metricsListenAddr(addr string, allowRemote bool) (*metrics.Addr, error) {
	if addr == "" {
		if allowRemote {
			return nil, usageErrorf("--metrics-allow-remote needs --metrics-listen")
		}
		return nil, nil
	}
	a, err := metrics.ParseAddr(addr, allowRemote)
	switch {
	case errors.Is(err, metrics.ErrNotLoopback):
		return nil, usageErrorf("--metrics-listen: %w; the endpoint has no authentication: "+
			"use unix:/path or a loopback address, or pass --metrics-allow-remote", err)
	case err != nil:
		return nil, usageErrorf("--metrics-listen: %w", err)
	}
	if err := a.Check(); err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	return &a, nil
}
