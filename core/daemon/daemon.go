package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/internal/version"
	"github.com/wcache/wcache/sdk"
)

// Daemon is one GPU's running daemon. Make it with Start, then call Run
// exactly once.
type Daemon struct {
	opts    Options
	plugin  Plugin
	backend sdk.Backend
	log     hclog.Logger

	info        Info
	config      cacheconfig.Config
	configProto *configv1.CacheConfig
	allocs      []sdk.AllocationID
	manifest    *manifest
	lock        *daemonfile.Lock
	started     time.Time
	generation  uint64

	reg      *registry
	srv      *grpc.Server
	lis      *net.UnixListener
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
}

// LoadStats measure the load.
type LoadStats struct {
	// Bytes is what was read from files; AllocatedBytes what was reserved
	// on the device (padding included).
	Bytes          uint64
	AllocatedBytes uint64
	Allocations    int
	Extents        int
	// Duration is the time of the Load calls (allocation and export
	// excluded): the fill rate is Bytes / Duration.
	Duration time.Duration
}

// BytesPerSecond is the fill rate of the load.
func (s LoadStats) BytesPerSecond() float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.Bytes) / s.Duration.Seconds()
}

// Start brings a daemon up, in this order: resolve and validate the device
// UUID, open and plan the checkpoint, complete the config, take the identity
// lock (daemonfile.Acquire: a live daemon is *daemonfile.LiveDaemonError
// unless opts.Force), allocate, load (opts.Progress), export, build the
// manifest, listen, serve, write the ready file.
//
// Start takes ownership of plugin: when it fails, everything it did is
// undone (allocations freed, files removed, lock released) and the plugin is
// closed. A plugin that exits during Start makes it fail with an error
// wrapping ErrPluginExited.
func Start(ctx context.Context, plugin Plugin, opts Options) (_ *Daemon, err error) {
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
		reg: newRegistry(), serveErr: make(chan error, 1), stopCh: make(chan struct{})}

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

	ck, err := d.openCheckpoint()
	if err != nil {
		return nil, err
	}
	pl, err := plan.Build(ck, opts.Plan)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", opts.Model, err)
	}
	if err := d.completeConfig(ctx, ck); err != nil {
		return nil, pluginErr("config", err)
	}
	d.info.Tensors = len(pl.Tensors)

	lock, res, err := daemonfile.Acquire(ctx, d.info.Paths, daemonfile.CleanupOptions{
		Force: opts.Force, Grace: opts.TakeoverGrace, Wait: opts.TakeoverWait,
		Logf: func(format string, args ...any) { d.log.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", uuid, err)
	}
	d.lock, d.info.Cleanup = lock, res
	undo = append(undo, func() {
		if err := lock.Release(); err != nil {
			d.log.Warn("releasing the lock", "error", err)
		}
	})

	undo = append(undo, func() { d.freeAll() })
	handles, err := d.fill(ctx, pl)
	if err != nil {
		return nil, pluginErr("load", err)
	}
	d.started = time.Now()
	d.generation = uint64(d.started.UnixNano())
	d.manifest = newManifest(uuid, binfo.Name, d.configProto, d.info.ConfigDigest, d.generation, pl, handles)

	if d.lis, err = listenUnix(d.info.Paths.Socket, opts.SocketGID); err != nil {
		return nil, err
	}
	undo = append(undo, func() {
		d.lis.Close()
		if err := os.Remove(d.info.Paths.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("removing the socket", "error", err)
		}
	})
	d.srv = d.newGRPCServer()
	go func() { d.serveErr <- d.srv.Serve(d.lis) }()
	undo = append(undo, func() { d.srv.Stop() })

	if err := d.writeReady(); err != nil {
		return nil, err
	}
	d.log.Info("ready", "socket", d.info.Paths.Socket, "tensors", d.info.Tensors,
		"bytes", d.info.Load.Bytes, "allocations", d.info.Load.Allocations)
	return d, nil
}

// Info describes the daemon.
func (d *Daemon) Info() Info { return d.info }

// openCheckpoint opens the whole checkpoint or the rank's pre-sharded files.
func (d *Daemon) openCheckpoint() (*safetensors.Checkpoint, error) {
	var ck *safetensors.Checkpoint
	var err error
	if d.opts.ShardPattern == "" {
		ck, err = safetensors.OpenCheckpoint(d.opts.Model)
	} else {
		var files []string
		c := d.opts.Config
		files, err = plan.ShardFiles(d.opts.Model, d.opts.ShardPattern, plan.ShardRanks{
			TPRank: c.TPRank, TPSize: c.TPSize, PPRank: c.PPRank, PPSize: c.PPSize})
		if err == nil {
			ck, err = safetensors.OpenFiles(files)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", d.opts.Model, err)
	}
	d.info.Model = d.opts.Model
	for _, f := range ck.Files {
		d.info.Files = append(d.info.Files, f.Path)
	}
	return ck, nil
}

// completeConfig fills the fields the daemon knows and validates the result.
func (d *Daemon) completeConfig(ctx context.Context, ck *safetensors.Checkpoint) error {
	c := d.opts.Config
	c.CheckpointDigest = cacheconfig.CheckpointDigest(ck)
	if c.Model == "" {
		c.Model = filepath.Clean(d.opts.Model)
	}
	if c.ProtocolVersion == 0 {
		c.ProtocolVersion = version.ProtocolVersion
	}
	if c.DeviceCapability == "" {
		devs, err := d.backend.Devices(ctx)
		if err != nil {
			return fmt.Errorf("device capability: %w", err)
		}
		for _, dev := range devs {
			if dev.Ordinal == d.opts.GPU {
				c.DeviceCapability = dev.Capability
			}
		}
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("daemon config: %w", err)
	}
	d.config = c
	d.configProto = c.ToProto()
	d.info.Config = c
	d.info.ConfigDigest = c.Digest()
	return nil
}

// fill allocates every arena of the plan, loads it and exports it.
func (d *Daemon) fill(ctx context.Context, pl *plan.Plan) ([]sdk.Handle, error) {
	for i, a := range pl.Allocations {
		id, got, err := d.backend.Allocate(ctx, d.opts.GPU, a.Bytes)
		if err != nil {
			return nil, fmt.Errorf("allocate arena %d of %d (%d bytes): %w", i+1, len(pl.Allocations), a.Bytes, err)
		}
		d.allocs = append(d.allocs, id)
		if got < a.Bytes {
			return nil, fmt.Errorf("allocate arena %d: backend reserved %d bytes, %d requested", i+1, got, a.Bytes)
		}
	}
	var base uint64
	startLoad := time.Now()
	for i, a := range pl.Allocations {
		var progress sdk.ProgressFunc
		if d.opts.Progress != nil {
			offset := base
			progress = func(done, _ uint64) { d.opts.Progress(offset+done, pl.Bytes) }
		}
		if err := d.backend.Load(ctx, d.allocs[i], a.Extents, progress); err != nil {
			return nil, fmt.Errorf("arena %d of %d: %w", i+1, len(pl.Allocations), err)
		}
		for _, e := range a.Extents {
			base += e.Length
		}
	}
	d.info.Load = LoadStats{Bytes: pl.Bytes, AllocatedBytes: pl.AllocatedBytes(), Allocations: len(pl.Allocations),
		Extents: pl.ExtentCount(), Duration: time.Since(startLoad)}
	if d.opts.Progress != nil {
		d.opts.Progress(pl.Bytes, pl.Bytes)
	}
	handles := make([]sdk.Handle, len(d.allocs))
	for i, id := range d.allocs {
		h, err := d.backend.Export(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("export arena %d: %w", i+1, err)
		}
		handles[i] = h
	}
	return handles, nil
}

// freeAll frees every allocation, bounded by DefaultFreeTimeout.
func (d *Daemon) freeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultFreeTimeout)
	defer cancel()
	for _, id := range d.allocs {
		if err := d.backend.Free(ctx, id); err != nil {
			d.log.Warn("freeing an allocation", "allocation", id, "error", err)
		}
	}
	d.allocs = nil
}

// newGRPCServer builds the daemon.v1 server with peer-credential checks and
// deadlines.
func (d *Daemon) newGRPCServer() *grpc.Server {
	auth := authorizer{ownUID: uint32(os.Geteuid()), allowUIDs: d.opts.AllowUIDs, allowGIDs: d.opts.AllowGIDs}
	srv := grpc.NewServer(
		grpc.Creds(peerCredentials{}),
		grpc.UnaryInterceptor(auth.unary),
		grpc.StreamInterceptor(auth.stream),
		grpc.ConnectionTimeout(connectionTimeout),
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: d.opts.KeepaliveTime, Timeout: d.opts.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: d.opts.KeepaliveTime / 2, PermitWithoutStream: true}),
	)
	daemonv1.RegisterDaemonServer(srv, &service{d: d})
	return srv
}

// writeReady writes the ready file: the daemon is listening.
func (d *Daemon) writeReady() error {
	pid := os.Getpid()
	st, err := daemonfile.ProcessStartTime(pid)
	if err != nil {
		return fmt.Errorf("ready file: own start time: %w", err)
	}
	r := daemonfile.Ready{PID: pid, StartTime: st, DeviceUUID: d.info.DeviceUUID, Socket: d.info.Paths.Socket,
		Backend: d.info.Backend, Model: d.info.Model, ConfigDigest: d.info.ConfigDigest, Version: version.Version,
		CreatedUnixMS: time.Now().UnixMilli()}
	if err := daemonfile.WriteReady(d.info.Paths.Ready, r); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// Run serves until the daemon stops and then shuts it down (see the package
// documentation for the order):
//
//   - a Stop that drained or was forced: Run returns nil;
//   - ctx cancelled (SIGTERM/SIGINT in the serve command): drain for
//     DrainTimeout, end the leases left, return nil;
//   - the plugin exited: end every lease with UNAVAILABLE, remove the files,
//     return an error wrapping ErrPluginExited;
//   - the gRPC server failed: return its error.
func (d *Daemon) Run(ctx context.Context) error {
	select {
	case <-d.stopCh:
		return d.shutdown(status.Error(codes.Unavailable, "daemon stopped"), true)
	case <-ctx.Done():
		d.log.Info("stop requested: draining", "timeout", d.opts.DrainTimeout)
		drained := make(chan error, 1)
		go func() {
			_, err := d.Stop(context.Background(), false, d.opts.DrainTimeout)
			drained <- err
		}()
		select {
		case err := <-drained:
			if err != nil {
				d.log.Warn("drain timed out: ending the leases left", "error", err)
			}
			return d.shutdown(status.Error(codes.Unavailable, "daemon stopped: drain timeout passed"), true)
		case <-d.plugin.Exited():
			return d.pluginExited()
		}
	case <-d.plugin.Exited():
		return d.pluginExited()
	case err := <-d.serveErr:
		serr := fmt.Errorf("serving on %s: %w", d.info.Paths.Socket, err)
		_ = d.shutdown(status.Error(codes.Unavailable, "daemon failed: "+serr.Error()), true)
		return serr
	}
}

// pluginExited ends every lease with UNAVAILABLE and shuts down without
// freeing (the memory went with the plugin process).
func (d *Daemon) pluginExited() error {
	perr := fmt.Errorf("%w: %v", ErrPluginExited, d.plugin.ExitError())
	d.log.Error("backend plugin exited: ending every lease", "error", perr)
	_ = d.shutdown(status.Error(codes.Unavailable, perr.Error()), false)
	return perr
}

// requestShutdown makes Run shut the daemon down.
func (d *Daemon) requestShutdown() {
	d.stopOnce.Do(func() { close(d.stopCh) })
}

// Stop stops the daemon as the Stop RPC does. With force, every lease ends
// at once. Otherwise every lease gets a KIND_DRAINING notice and Stop waits
// up to timeout (0: DrainTimeout) for them to go; if some are still there it
// returns a *DrainTimeoutError and the daemon keeps serving. On success Run
// shuts the daemon down. It returns the number of leases when it began.
func (d *Daemon) Stop(ctx context.Context, force bool, timeout time.Duration) (int, error) {
	n := len(d.reg.list())
	if force {
		d.reg.stop(status.Error(codes.Unavailable, "daemon stopped (forced)"))
		d.requestShutdown()
		return n, nil
	}
	if timeout <= 0 {
		timeout = d.opts.DrainTimeout
	}
	deadline := time.Now().Add(timeout)
	notice := &daemonv1.Notice{Kind: daemonv1.Notice_KIND_DRAINING, DeadlineUnixMs: deadline.UnixMilli(),
		Message: fmt.Sprintf("daemon of %s is stopping: release the lease within %s", d.info.DeviceUUID, timeout)}
	if !d.reg.beginDrain(notice) {
		return n, nil // already stopping
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if d.reg.waitEmpty(wctx) {
		d.reg.stop(status.Error(codes.Unavailable, "daemon stopped"))
		d.reg.endDrain()
		d.requestShutdown()
		return n, nil
	}
	left := d.leaseInfos()
	d.reg.endDrain()
	return n, &DrainTimeoutError{Timeout: timeout.String(), Leases: left}
}

// shutdown ends what is left and releases everything, in order.
func (d *Daemon) shutdown(leaseErr error, free bool) error {
	d.reg.stop(leaseErr)
	done := make(chan struct{})
	go func() {
		d.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(gracefulStopTimeout):
		d.srv.Stop()
		<-done
	}
	var errs []error
	if err := daemonfile.RemoveFiles(d.info.Paths); err != nil {
		errs = append(errs, fmt.Errorf("removing files: %w", err))
	}
	if free {
		d.freeAll()
	}
	if err := d.plugin.Close(); err != nil {
		// The plugin's memory is released either way; a kill is expected.
		d.log.Warn("closing the backend plugin", "error", err)
	}
	if err := d.lock.Release(); err != nil {
		errs = append(errs, fmt.Errorf("releasing the lock: %w", err))
	}
	d.log.Info("stopped")
	return errors.Join(errs...)
}
