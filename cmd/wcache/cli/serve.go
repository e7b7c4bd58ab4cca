package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/metrics"
)

// serveLong is serve's --help text.
const serveLong = `Serve runs the wcache daemon of one GPU. It resolves the GPU's UUID through
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
known (the digest cache, hub blob names). Device arenas are filled through
staging memfds the plugin loads (docs/peer-fill.md).

With --metrics-listen, serve also answers GET /metrics (Prometheus) and
GET /healthz (200 "serving", 503 otherwise) on a Unix socket (unix:/path,
mode 0600) or a loopback TCP address, from the moment it is ready until it
has stopped.`

// newServeCommand is wcache serve: register the flags, then on run check
// them and build the daemon's options (serveflags.go), start the daemon,
// say what it serves, and serve until stopped.
func newServeCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve --backend NAME --gpu-id N [--model DIR]...",
		Short: "Run the daemon of one GPU: load the weights once, serve attaches until stopped",
		Long:  serveLong,
		Args:  cobra.NoArgs,
	}
	f := registerServeFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		setup, err := f.options(e)
		if err != nil {
			return err
		}
		return serve(cmd.Context(), e, f, setup)
	}
	return cmd
}

// serve runs the daemon the setup describes until a signal or wcache stop
// ends it: it starts the backend plugin, loads (or takes over), prints one
// "serving" line, and serves attaches, with the metrics endpoint when one
// is set up. A failed start returns the daemon's error.
func serve(ctx context.Context, e *env, f *serveFlags, setup serveSetup) error {
	ctx, stop := serveSignals(ctx)
	defer stop()
	log, opts := setup.log, setup.opts
	// SIGUSR1 reads the peer credentials again (peerreload.go).
	defer watchPeerReload(opts.Peer.Creds, log)()

	bf := f.cache.backend
	plugin, err := bf.startPlugin(ctx, log, nil)
	if err != nil {
		return err
	}
	// With descriptor handles a dead plugin is replaced, not fatal —
	// by the very file that was started (or one --plugin-sha256 pins):
	// a binary replaced since is refused.
	first := plugin.Binary()
	opts.RestartPlugin = func(ctx context.Context) (daemon.Plugin, error) { return bf.startPlugin(ctx, log, &first) }
	bar := newProgress("loading", e.stderr, log, f.logFormat == "text" && isTerminal(e.stderr))
	opts.Progress = bar.update
	d, err := daemon.Start(ctx, plugin, opts)
	bar.finish()
	if err != nil {
		return err
	}
	var metricsListen string
	if setup.endpoint != nil {
		if metricsListen, err = setup.endpoint.Listen(d); err != nil {
			return err
		}
	}
	info := d.Info()
	printServing(e.stdout, info, setup.model)
	if info.Cleanup.Action != "" && info.Cleanup.Action != "none" {
		log.Info("before starting", "action", info.Cleanup.Action, "pid", info.Cleanup.PID,
			"removed", strings.Join(info.Cleanup.Removed, ","))
	}
	if setup.endpoint == nil {
		return d.Run(ctx)
	}
	log.Info("metrics endpoint", "addr", metricsListen)
	return setup.endpoint.Run(ctx, d)
}

// serveSignals returns ctx cancelled by SIGTERM, SIGINT or SIGHUP, and
// ignores SIGPIPE for the rest of the process.
//
// SIGHUP (a closed terminal, logind) drains like SIGTERM: a daemon has no
// configuration to reload, and dying without a drain would leave stale
// files and cut its leases off. A daemon must outlive whoever reads its
// output: under a launcher killed with SIGKILL, stderr is a pipe without
// a reader, and the parent-death SIGTERM starts a drain whose first log
// line would raise SIGPIPE and kill the daemon before it removes its
// socket and ready file. Ignored, the write fails with EPIPE and is
// dropped.
func serveSignals(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	return ctx, stop
}

// printServing writes the line that says what a started daemon serves:
// taken over, filled from a peer, empty (model is ""), or loaded; then one
// line per generation when there are several.
func printServing(w io.Writer, info daemon.Info, model string) {
	switch {
	case info.Load.Source == daemon.SourceTakeover:
		fmt.Fprintf(w, "serving %s (%s) on %s: %d tensors, %s in %d allocation(s), taken over in %s (nothing loaded)\n",
			info.DeviceUUID, info.Backend, info.Paths.Socket, info.Tensors, humanBytes(info.Load.Bytes),
			info.Load.Allocations, info.StartDuration.Round(time.Millisecond))
	case strings.HasPrefix(info.Load.FilledFrom, "peer "):
		fmt.Fprintf(w, "serving %s (%s) on %s: %d tensors, %s in %d allocation(s), filled from a peer in %s (%s/s)\n",
			info.DeviceUUID, info.Backend, info.Paths.Socket, info.Tensors, humanBytes(info.Load.Bytes),
			info.Load.Allocations, info.Load.Duration.Round(time.Millisecond), humanBytes(uint64(info.Load.BytesPerSecond())))
	case model == "":
		fmt.Fprintf(w, "serving %s (%s) on %s: empty, waiting for a publish\n",
			info.DeviceUUID, info.Backend, info.Paths.Socket)
	default:
		how := "loaded"
		if info.Load.FromPeer > 0 {
			how = "filled from " + info.Load.FilledFrom
		}
		fmt.Fprintf(w, "serving %s (%s) on %s: %d tensors, %s in %d allocation(s), %s in %s (%s/s)\n",
			info.DeviceUUID, info.Backend, info.Paths.Socket, info.Tensors, humanBytes(info.Load.Bytes),
			info.Load.Allocations, how, info.Load.Duration.Round(time.Millisecond), humanBytes(uint64(info.Load.BytesPerSecond())))
	}
	if len(info.Generations) > 1 {
		for _, g := range info.Generations {
			fmt.Fprintf(w, "  generation %d: %s (%s), %d tensors, %s on the device\n",
				g.ID, g.Model, g.ConfigDigest, g.Tensors, humanBytes(g.DeviceBytes))
		}
	}
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
