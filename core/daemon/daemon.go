package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/procstat"
	"github.com/wcache/wcache/sdk/version"
)

// Daemon is one GPU's running daemon. Make it with Start, then call Run
// exactly once.
type Daemon struct {
	opts    Options
	plugin  Plugin
	backend sdk.Backend
	log     hclog.Logger

	// mu guards what the daemon holds, which a Publish or an Evict
	// replaces: info's Model, Files, Config, ConfigDigest, Tensors and Load,
	// and config, configProto, allocs, manifest and generation. Readers
	// that also check the registry's state (Attach) hold it across both so
	// that they see one generation.
	mu          sync.RWMutex
	info        Info
	config      cacheconfig.Config
	configProto *configv1.CacheConfig
	allocs      []sdk.AllocationID
	manifest    *manifest
	lock        *daemonfile.Lock
	started     time.Time
	generation  uint64
	// released: the identity lock and files are released to a successor
	// that has not served yet (handover.go); the ready file is not rewritten.
	released bool
	// restarts count the plugins replaced (restart.go).
	restarts restartStats
	// publishing is the sum of the arenas allocated by a publish in
	// progress (0 when none): part of heldBytes (memory.go).
	publishing atomic.Uint64

	reg     *registry
	metrics Metrics
	srv     *grpc.Server
	lis     *net.UnixListener
	// glis is what the gRPC server accepts on: lis, paused while a
	// successor takes over (handover.go).
	glis *handoverListener
	// watchMu guards watchStop, runCtx and runCancel: Run's check of the
	// daemon files, stopped while a successor takes over (handover.go).
	watchMu   sync.Mutex
	watchStop context.CancelFunc
	runCtx    context.Context
	runCancel context.CancelCauseFunc
	// fdLis is the descriptor channel (fdserver.go); replaced under mu by
	// retakeIdentity.
	fdLis    *net.UnixListener
	serveErr chan error
	stopCh   chan struct{}
	stopOnce sync.Once
}

// Info describes a started daemon.
type Info struct {
	DeviceUUID string
	Paths      paths.Paths
	Backend    string
	// Model is the checkpoint directory; Files are the files loaded.
	Model string
	Files []string
	// Config is the daemon's full CacheConfig and ConfigDigest its digest.
	Config       cacheconfig.Config
	ConfigDigest string
	Tensors      int
	// Cleanup says what was found before the daemon took the lock (stale
	// files removed, a live daemon taken over).
	Cleanup daemonfile.CleanupResult
	Load    LoadStats
	// Content is the content record of every file loaded (sorted by name):
	// its digest, hashed as the fill passed the bytes, and its identity
	// as checked at the end of the load.
	Content []cacheconfig.FileContent
	// StartDuration is the time from the start of Start until the socket
	// listened (the backend plugin was already running).
	StartDuration time.Duration
}

// Start brings a daemon up, in this order: resolve and validate the device
// UUID, open and plan the checkpoint, complete the config, take the identity
// lock (daemonfile.Acquire: a live daemon is *daemonfile.LiveDaemonError
// unless opts.Force), allocate, load (opts.Progress), export, build the
// manifest, listen, serve, write the ready file. Without opts.Model the
// checkpoint steps are skipped: the daemon starts empty (StateEmpty) and
// waits for a Publish.
//
// Start takes ownership of plugin: when it fails, everything it did is
// undone (allocations freed, files removed, lock released) and the plugin is
// closed. A plugin that exits during Start makes it fail with an error
// wrapping ErrPluginExited.
func Start(ctx context.Context, plugin Plugin, opts Options) (_ *Daemon, err error) {
	begin := time.Now()
	var undo []func()
	defer func() {
		if err == nil {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		if cerr := plugin.Close(); cerr != nil {
			opts.Logger.Warn("closing backend plugin", "error", cerr)
		}
	}()
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// A plugin that dies mid-way cancels whatever backend call is running.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-plugin.Exited():
			cancel()
		case <-ctx.Done():
		}
	}()
	pluginErr := func(what string, err error) error {
		select {
		case <-plugin.Exited():
			return fmt.Errorf("%s: %w: %v", what, ErrPluginExited, plugin.ExitError())
		default:
			return fmt.Errorf("%s: %w", what, err)
		}
	}

	d := &Daemon{opts: opts, plugin: plugin, backend: plugin.Backend(), log: opts.Logger,
		reg: newRegistry(), metrics: noMetrics{}, serveErr: make(chan error, 1), stopCh: make(chan struct{})}

	binfo, err := d.backend.Info(ctx)
	if err != nil {
		return nil, pluginErr("backend info", err)
	}
	d.info.Backend = binfo.Name
	uuid, err := d.backend.DeviceUUID(ctx, opts.GPU)
	if err != nil {
		return nil, pluginErr(fmt.Sprintf("device UUID of GPU %d", opts.GPU), err)
	}
	if err := paths.ValidateDeviceUUID(uuid); err != nil {
		return nil, fmt.Errorf("backend %s returned an unusable UUID for GPU %d: %w", binfo.Name, opts.GPU, err)
	}
	d.info.DeviceUUID = uuid
	d.log = d.log.With("device", uuid)
	if d.info.Paths, err = opts.Layout.For(uuid); err != nil {
		return nil, err
	}
	if opts.Metrics != nil {
		m, err := opts.Metrics(uuid)
		if err != nil {
			return nil, fmt.Errorf("metrics of device %s: %w", uuid, err)
		}
		if m != nil {
			d.metrics = m
		}
	}

	startPlan := time.Now()
	var pl *plan.Plan
	var ck *safetensors.Checkpoint
	if opts.Model != "" {
		ck, err = d.openCheckpoint()
		if err != nil {
			return nil, err
		}
		if pl, err = plan.Build(ck, opts.Plan); err != nil {
			return nil, fmt.Errorf("plan %s: %w", opts.Model, err)
		}
		if limit := opts.MaxBytes; limit != 0 && pl.AllocatedBytes() > limit {
			// Refused before the lock: a --force start does not end the
			// device's daemon for a load that cannot fit.
			return nil, &MemoryError{What: "load", Need: pl.AllocatedBytes(), MaxBytes: limit}
		}
		if err := d.completeConfig(ctx, ck); err != nil {
			return nil, pluginErr("config", err)
		}
		d.info.Tensors = len(pl.Tensors)
	}
	planned := time.Since(startPlan)

	var took *takeover
	replaceEmpty := false
	if opts.Takeover {
		took, err = d.takeOver(ctx)
		if errors.Is(err, errEmptyPredecessor) {
			d.log.Info("takeover: replacing an empty daemon (stopping it), starting as usual", "reason", err.Error())
			took, err, replaceEmpty = nil, nil, true
		}
		if err != nil {
			return nil, pluginErr("takeover", err)
		}
		if took == nil && !replaceEmpty {
			d.log.Info("takeover: no daemon on the device's socket, starting as usual")
		} else {
			pl = nil // nothing to load: the memory is here
			undo = append(undo, func() {
				if took == nil {
					return // an empty daemon replaced
				}
				// Closing the connection makes the previous daemon take its lock back.
				took.finish()
				if d.manifest != took.manifest { // else freeAll does it
					d.freeAllocs(took.ids)
					took.manifest.files.close()
				}
			})
		}
	}

	lock, res, err := daemonfile.Acquire(ctx, d.info.Paths, daemonfile.CleanupOptions{
		// The daemon taken over exits by itself once it handed over; Force
		// waits for it (and ends it, should it linger).
		// An empty daemon is replaced the same way.
		Force: opts.Force || took != nil || replaceEmpty, Grace: opts.TakeoverGrace, Wait: opts.TakeoverWait,
		Logf: func(format string, args ...any) { d.log.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", uuid, err)
	}
	d.lock, d.info.Cleanup = lock, res
	locked := time.Since(startPlan) - planned
	undo = append(undo, func() {
		if err := lock.Release(); err != nil {
			d.log.Warn("releasing the lock", "error", err)
		}
	})

	undo = append(undo, func() { d.freeAll() })
	d.started = time.Now()
	if pl != nil {
		// The device's free memory is read once the lock is held: a
		// daemon taken over with --force has released its memory by now.
		if err := d.admit(ctx, "load", pl.AllocatedBytes()); err != nil {
			return nil, pluginErr("load", err)
		}
		handles, err := d.fill(ctx, pl)
		if err != nil {
			return nil, pluginErr("load", err)
		}
		content, err := d.contentOf(ctx, ck, d.info.Load.Fill.Leaves)
		if err != nil {
			return nil, err
		}
		d.info.Load.Fill.Leaves = nil // in Content now
		// After the content digests: the leaves the daemon hashed itself
		// were read by path too.
		if err := unchanged(ck); err != nil {
			return nil, err
		}
		if opts.VerifyLoad {
			if err := d.verifyLoad(ctx, pl, ck); err != nil {
				return nil, pluginErr("verify", err)
			}
			d.log.Info("verified the load against the checkpoint", "bytes", pl.Bytes)
		}
		d.info.Load.Plan, d.info.Load.Lock = planned, locked
		d.metrics.Loaded(d.info.Load, d.info.Tensors)
		d.started = time.Now()
		d.generation = uint64(d.started.UnixNano())
		d.manifest = newManifest(uuid, binfo.Name, d.configProto, d.info.ConfigDigest, d.generation, pl, handles)
		d.manifest.content = cacheconfig.FilesToProto(content)
		d.manifest.policies = cacheconfig.PolicyStrings(d.opts.ContentPolicies)
		d.info.Content = content
	} else if took != nil {
		d.adopt(took, planned, locked)
		d.metrics.Loaded(d.info.Load, d.info.Tensors)
	} else {
		d.configProto = d.emptyConfigProto()
		d.reg.setState(StateEmpty)
	}
	if d.manifest != nil {
		// Loaded or taken over: no client may write the memory.
		if err := d.sealWrites(d.manifest, true); err != nil {
			return nil, err
		}
	}
	d.reg.setMetrics(d.metrics)

	if d.lis, err = ListenUnix(d.info.Paths.Socket, opts.SocketGID); err != nil {
		return nil, err
	}
	undo = append(undo, func() {
		d.lis.Close()
		if err := os.Remove(d.info.Paths.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("removing the socket", "error", err)
		}
	})
	if d.fdLis, err = d.listenFDChannel(); err != nil {
		return nil, err
	}
	undo = append(undo, func() {
		d.fdLis.Close()
		if err := os.Remove(fdchannel.Path(d.info.Paths.Socket)); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("removing the descriptor channel", "error", err)
		}
	})
	go d.serveFDChannel(d.fdLis)
	d.info.StartDuration = time.Since(begin)
	var auth authorizer
	d.srv, auth = d.newGRPCServer()
	d.glis = newHandoverListener(d.lis)
	lis := newPeerListener(d.glis, auth.allows, d.log)
	go func() { d.serveErr <- d.srv.Serve(lis) }()
	undo = append(undo, func() { d.srv.Stop() })

	if err := d.writeReady(); err != nil {
		return nil, err
	}
	// Recorded so that shutdown removes only these very files, and Run
	// notices when they are gone.
	if err := d.ownFiles(); err != nil {
		return nil, err
	}
	if took != nil {
		// The previous daemon ends its leases and exits only now: until
		// this message it keeps its memory and takes its lock back.
		if err := took.tk.Serving(); err != nil {
			d.log.Warn("takeover: telling the previous daemon that this one serves", "error", err)
		}
		took.finish()
	}
	d.log.Info("ready", "socket", d.info.Paths.Socket, "tensors", d.info.Tensors,
		"bytes", d.info.Load.Bytes, "allocations", d.info.Load.Allocations)
	return d, nil
}

// ownFiles records the daemon's socket, descriptor channel and ready file
// as its own (daemonfile.Lock.Own).
func (d *Daemon) ownFiles() error {
	for _, f := range []string{d.info.Paths.Socket, fdchannel.Path(d.info.Paths.Socket), d.info.Paths.Ready} {
		if err := d.lock.Own(f); err != nil {
			return err
		}
	}
	return nil
}

// Info describes the daemon and what it holds now.
func (d *Daemon) Info() Info {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.info
}

// newGRPCServer builds the daemon.v1 server with peer-credential checks,
// deadlines and limits (connlimit.go), and returns its authorizer for the
// listener's per-uid limits.
func (d *Daemon) newGRPCServer() (*grpc.Server, authorizer) {
	auth := authorizer{ownUID: uint32(os.Geteuid()), allowUIDs: d.opts.AllowUIDs, allowGIDs: d.opts.AllowGIDs,
		denied: func(method string) {
			if method == daemonv1.Daemon_Attach_FullMethodName {
				d.metrics.AttachFailed(AttachPermissionDenied)
			}
		}}
	srv := grpc.NewServer(
		grpc.Creds(peerCredentials{}),
		grpc.ForceServerCodecV2(newWireCodec()),
		grpc.UnaryInterceptor(auth.unary),
		grpc.StreamInterceptor(auth.stream),
		grpc.ConnectionTimeout(connectionTimeout),
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: d.opts.KeepaliveTime, Timeout: d.opts.KeepaliveTimeout,
			MaxConnectionIdle: maxConnectionIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: d.opts.KeepaliveTime / 2, PermitWithoutStream: true}),
	)
	daemonv1.RegisterDaemonServer(srv, &service{d: d})
	return srv, auth
}

// rewriteReady rewrites the ready file when a Publish or an Evict changed
// what the daemon holds (the caller holds d.mu), and records the new file as
// the daemon's own so that Run's file watch does not take it for lost.
func (d *Daemon) rewriteReady() error {
	if d.released {
		return nil // a takeover in progress: retakeIdentity writes it, or the successor does
	}
	return d.lock.Replace(d.info.Paths.Ready, d.writeReady)
}

// writeReady writes the ready file: the daemon is listening.
func (d *Daemon) writeReady() error {
	pid := os.Getpid()
	st, err := procstat.StartTime(pid)
	if err != nil {
		return fmt.Errorf("ready file: own start time: %w", err)
	}
	r := daemonfile.Ready{PID: pid, StartTime: st, DeviceUUID: d.info.DeviceUUID, GPU: d.opts.GPU, Socket: d.info.Paths.Socket,
		Backend: d.info.Backend, Model: d.info.Model, ConfigDigest: d.info.ConfigDigest, Version: version.Version,
		CreatedUnixMS: time.Now().UnixMilli()}
	if err := daemonfile.WriteReady(d.info.Paths.Ready, r); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}
