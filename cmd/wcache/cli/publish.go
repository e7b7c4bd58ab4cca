package cli

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// publishFlags are serve's publish-mode flags.
type publishFlags struct {
	verify  bool
	timeout time.Duration
}

func (f *publishFlags) add(fs *pflag.FlagSet) {
	fs.BoolVar(&f.verify, "verify-publish", false,
		"require a SHA-256 per tensor with every publish and check it through the backend before serving")
	fs.DurationVar(&f.timeout, "publish-timeout", daemon.DefaultPublishTimeout,
		"abort a publish (freeing its memory) that has not committed this long after it began")
}

// daemonSelector is how publish and evict name one daemon: --socket,
// --device-uuid, or --gpu-id through the backend.
type daemonSelector struct {
	socket, uuid string
	gpu          int
}

func (s *daemonSelector) add(fs *pflag.FlagSet, verb string) {
	fs.StringVar(&s.socket, "socket", "", verb+" the daemon at this socket path")
	fs.StringVar(&s.uuid, "device-uuid", "", verb+" the daemon of this device UUID")
	fs.IntVar(&s.gpu, "gpu-id", -1, verb+" the daemon of the GPU the backend sees as this ordinal")
}

// set reports whether the selector names a daemon at all.
func (s *daemonSelector) set() bool { return s.socket != "" || s.uuid != "" || s.gpu >= 0 }

// check refuses more than one way of naming the daemon (a usage error).
func (s *daemonSelector) check() error {
	n := 0
	for _, set := range []bool{s.socket != "", s.uuid != "", s.gpu >= 0} {
		if set {
			n++
		}
	}
	if n > 1 {
		return usageErrorf("--socket, --device-uuid and --gpu-id exclude each other")
	}
	return nil
}

// target resolves the selector; with --gpu-id it starts the backend plugin
// (closed by the returned func) and returns it too, nil otherwise.
func (s *daemonSelector) target(ctx context.Context, e *env, bf *backendFlags, layout paths.Layout) (client.Target, sdk.Backend, func(), error) {
	if err := s.check(); err != nil {
		return client.Target{}, nil, nil, err
	}
	switch {
	case s.socket != "":
		return client.BySocket(s.socket), nil, func() {}, nil
	case s.uuid != "":
		return client.ByDeviceUUID(layout, s.uuid), nil, func() {}, nil
	case s.gpu >= 0:
		plugin, err := bf.start(ctx, e)
		if err != nil {
			return client.Target{}, nil, nil, err
		}
		return client.ByOrdinal(layout, plugin.Backend(), s.gpu), plugin.Backend(), func() { plugin.Close() }, nil
	}
	return client.Target{}, nil, nil, usageErrorf("name a daemon with --gpu-id, --device-uuid or --socket")
}

func newPublishCommand(e *env) *cobra.Command {
	var (
		sel          daemonSelector
		model        string
		shardPattern string
		digest       bool
		clientName   string
	)
	cmd := &cobra.Command{
		Use:   "publish (--gpu-id N | --device-uuid UUID | --socket PATH) --model DIR [config flags]",
		Short: "Publish a checkpoint's tensors into an empty daemon from this process",
		Long: `Publish fills an empty daemon (wcache serve without --model, or one emptied
by wcache evict) with the tensors of a safetensors checkpoint, from this
client process: the daemon plans and allocates, this process maps the
writable handles and copies the file bytes in, then commits. The daemon then
serves them under the CacheConfig built from the flags and the checkpoint's
header digest, so that wcache attach --model DIR with the same flags finds
them. It is the path for tools that pre-process weights offline and for
tests; engines publish their own post-processed tensors through the client
libraries (docs/publish.md). Host-mappable handles (the mock's memfd and
posix-shm) are filled from this process; GPU handles (cuda-ipc, hip-ipc)
through the backend with --gpu-id: its plugin imports them and loads the
files into them.

--sha256 sends a SHA-256 per tensor with the commit (required by a daemon
run with --verify-publish).

Exit codes: 3 no daemon, 1 anything else (a publish in progress names the
publisher's pid; a daemon that already holds weights must be evicted first).`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	cache := addCacheFlags(fs)
	bf := cache.backend
	sel.add(fs, "publish to")
	fs.StringVar(&model, "model", "", "checkpoint directory whose tensors to publish, or a hub id org/name[@revision] in the local Hugging Face cache")
	fs.StringVar(&shardPattern, "shard-pattern", "", "pre-sharded per-rank files inside --model")
	fs.BoolVar(&digest, "sha256", false, "send a SHA-256 per tensor with the commit")
	fs.StringVar(&clientName, "client-name", "wcache-publish", "name shown by wcache status while publishing")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		layout, cfg, err := cache.resolveWithModel(&model, "")
		if err != nil {
			return err
		}
		if !sel.set() {
			return usageErrorf("name a daemon with --gpu-id, --device-uuid or --socket")
		}
		if err := sel.check(); err != nil {
			return err
		}
		// The same identity as `wcache serve --model DIR` and `wcache
		// attach --model DIR` with these flags.
		ck, cfg, err := openModel(model, shardPattern, cfg)
		if err != nil {
			return err
		}

		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		target, backend, closeTarget, err := sel.target(ctx, e, bf, layout)
		if err != nil {
			return err
		}
		defer closeTarget()
		c, err := client.Dial(ctx, target, client.Options{ClientName: clientName})
		if err != nil {
			return attachExit(err)
		}
		defer c.Close()
		pub, src, err := client.OpenCheckpointPublication(ctx, ck, cfg)
		if err != nil {
			return err
		}
		defer src.Close()
		begin := time.Now()
		shmFill := client.ShmFill(src.Copy, digest)
		res, err := c.Publish(ctx, pub, func(ctx context.Context, plan *client.PublishPlan) ([][]byte, error) {
			return publishFill(ctx, plan, shmFill, backend, sel.gpu, src.Ranges(), digest)
		})
		if err != nil {
			return err
		}
		verified := ""
		if res.Verified {
			verified = ", verified by the daemon"
		}
		fmt.Fprintf(e.stdout, "published %d tensors (%s) to %s in %s: generation %d, config digest %s%s\n",
			res.Tensors, humanBytes(res.Bytes), c.Socket(), time.Since(begin).Round(time.Millisecond),
			res.Generation, res.ConfigDigest, verified)
		return nil
	}
	return cmd
}

// publishFill fills host-mappable handles (memfd, posix-shm) from this
// process (shm) and any other kind through the backend, which needs
// --gpu-id. ranges are the table's file ranges, in table order.
func publishFill(ctx context.Context, plan *client.PublishPlan, shm client.FillFunc, backend sdk.Backend, gpu int,
	ranges []client.FileRange, digest bool) ([][]byte, error) {
	for _, h := range plan.Handles {
		if h.Kind == names.KindPosixShm || h.Kind == names.KindMemfd {
			continue
		}
		if backend == nil {
			return nil, fmt.Errorf("the daemon hands out %s handles, which this process cannot map: name the daemon with --backend and --gpu-id, so that the backend imports them", h.Kind)
		}
		return client.BackendFill(backend, gpu, ranges, digest)(ctx, plan)
	}
	return shm(ctx, plan)
}
