package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/procstat"
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

	// mu guards the daemon's identity files and listeners against a
	// takeover (released, fdLis, the ready file). What the daemon holds,
	// its generations, is the registry's (reg.mu; generation.go).
	mu      sync.RWMutex
	info    Info
	lock    *daemonfile.Lock
	started time.Time
	// allocMu is held from a load's or publish's admission (memory.go) to
	// the end of its allocations, and by an evict's free.
	allocMu sync.Mutex
	// released: the identity lock and files are released to a successor
	// that has not served yet (handover.go); the ready file is not rewritten.
	released bool
	// restarts count the plugins replaced (restart.go).
	restarts restartStats

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
	// peer is the cross-node peer endpoint (peerserver.go).
	peer     peerEndpoint
	stopOnce sync.Once
}

// Info describes a started daemon. Model, Files, Config, ConfigDigest,
// Tensors, Load and Content describe its primary generation (the oldest
// serving one); Generations lists all of them.
type Info struct {
	DeviceUUID string
	Paths      paths.Paths
	Backend    string
	// Generations are every generation the daemon holds, oldest first.
	Generations []GenerationInfo
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

	if err := d.capFromFraction(ctx); err != nil {
		return nil, pluginErr("memory cap", err)
	}
	opts = d.opts
	startPlan := time.Now()
	var jobs []*loadJob
	var planned uint64
	for _, src := range opts.sources() {
		job, err := d.prepare(ctx, src)
		if err != nil {
			return nil, pluginErr("config", err)
		}
		for _, o := range jobs {
			if o.g.digest == job.g.digest {
				return nil, fmt.Errorf("models %s and %s have the same config (%s): load it once", o.src.Model, src.Model, job.g.digest)
			}
		}
		jobs = append(jobs, job)
		planned += job.pl.AllocatedBytes()
	}
	if limit := opts.MaxBytes; limit != 0 && planned > limit {
		// Refused before the lock: a --force start does not end the
		// device's daemon for a load that cannot fit.
		return nil, &MemoryError{What: "load", Need: planned, MaxBytes: limit}
	}
	planDone := time.Since(startPlan)

	var took *takeover
	replaceEmpty := false
	if opts.Takeover {
		took, err = d.takeOver(ctx, jobs)
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
			jobs = nil // nothing to load: the memory is here
			undo = append(undo, func() {
				if took == nil {
					return // an empty daemon replaced
				}
				// Closing the connection makes the previous daemon take its lock back.
				took.finish()
				if !took.adopted { // else freeAll does it
					for _, tg := range took.gens {
						d.freeAllocs(tg.ids)
						tg.manifest.files.close()
					}
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
	locked := time.Since(startPlan) - planDone
	undo = append(undo, func() {
		if err := lock.Release(); err != nil {
			d.log.Warn("releasing the lock", "error", err)
		}
	})

	undo = append(undo, func() { d.freeAll() })
	d.started = time.Now()
	for _, job := range jobs {
		if err := d.loadGeneration(ctx, job, uuid, binfo.Name); err != nil {
			return nil, pluginErr("load", err)
		}
		job.g.load.Plan, job.g.load.Lock = planDone, locked
		d.metrics.Loaded(job.g.load, job.g.tensors)
	}
	if took != nil {
		d.adopt(took, planDone, locked)
		for _, tg := range took.gens {
			d.metrics.Loaded(tg.g.load, tg.g.tensors)
		}
	}
	d.started = time.Now()
	for _, g := range d.reg.gens {
		// Loaded or taken over: no client may write the memory.
		if err := d.sealWrites(g.manifest, true); err != nil {
			return nil, err
		}
	}
	d.reportHeld()
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

	// Before the ready file (and so before "serving"): the peer port
	// listens — on the previous daemon's socket, passed with "released",
	// or our own — when a client or the previous daemon sees this one
	// ready.
	var inherited *os.File
	if took != nil {
		inherited, took.peerListener = took.peerListener, nil
	}
	if err := d.startPeerServer(inherited); err != nil {
		return nil, err
	}
	undo = append(undo, d.stopPeerServer)

	if err := d.writeReady(); err != nil {
		return nil, err
	}
	// Recorded so that shutdown removes only these very files, and Run
	// notices when they are gone.
	if err := d.ownFiles(); err != nil {
		return nil, err
	}
	if took != nil {
		// The previous daemon ends its leases and exits only once it has
		// seen this one hold the lock, listen and name itself in the ready
		// file (daemonfile.VerifySuccessor): until then it keeps its memory
		// and takes its lock back.
		if err := took.tk.Serving(); err != nil {
			d.log.Warn("takeover: telling the previous daemon that this one serves", "error", err)
		}
		took.finish()
	}
	d.log.Info("ready", "socket", d.info.Paths.Socket, "generations", len(d.reg.gens), "device_bytes", d.HeldBytes())
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
	info := d.info
	d.mu.RUnlock()
	d.reg.mu.Lock()
	defer d.reg.mu.Unlock()
	info.Generations = make([]GenerationInfo, len(d.reg.gens))
	for i, g := range d.reg.gens {
		info.Generations[i] = d.reg.genInfoLocked(g)
	}
	if g := d.reg.primaryLocked(); g != nil {
		info.Model, info.Files, info.Config, info.ConfigDigest = g.model, g.files, g.config, g.digest
		info.Tensors, info.Load, info.Content = g.tensors, g.load, g.content
	}
	return info
}

// loadGeneration admits, allocates, loads and exports job's checkpoint,
// checks it (content digests, files unchanged, Options.VerifyLoad) and adds
// it as a serving generation (Start, before the daemon listens).
func (d *Daemon) loadGeneration(ctx context.Context, job *loadJob, uuid, backend string) error {
	d.allocMu.Lock()
	defer d.allocMu.Unlock()
	g, pl, ck := job.g, job.pl, job.ck
	if err := d.admit(ctx, "load", pl.AllocatedBytes(), g); err != nil {
		return err
	}
	// A peer holding the same weights first (peerfill.go), else the files.
	handles, content, fromPeer, err := d.loadFromPeer(ctx, job)
	cached := d.digestsInCache(ck) // every file's digest known: the fill hashes nothing
	if err == nil && !fromPeer {
		fallback := g.load.FillFallback
		fillCtx := ctx
		if cached != nil {
			fillCtx = sdk.WithoutDigest(ctx)
		}
		handles, err = d.fill(fillCtx, pl, g)
		g.load.FillFallback = fallback
	}
	if err != nil {
		d.freeAllocs(g.allocs)
		return err
	}
	g.planned = 0
	m := newManifest(uuid, backend, g.configProto, g.digest, 0, pl, handles)
	free := func() {
		d.freeAllocs(g.allocs)
		m.files.close()
	}
	if !fromPeer {
		if content, err = d.contentOf(ctx, ck, g.load.Fill.Leaves, cached, &g.load); err != nil {
			free()
			return err
		}
		g.load.Fill.Leaves = nil // in Content now
	}
	// After the content digests: the leaves the daemon hashed itself
	// were read by path too.
	if err := unchanged(ck); err != nil {
		free()
		return err
	}
	if d.opts.VerifyLoad && !fromPeer { // a peer fill was verified before it was taken (fillFromPeers)
		if err := d.verifyLoad(ctx, pl, g.allocs, ck); err != nil {
			free()
			return fmt.Errorf("verify: %w", err)
		}
		d.log.Info("verified the load against the checkpoint", "model", g.model, "bytes", pl.Bytes)
	}
	if !fromPeer && cached == nil { // cached: every entry is there already
		d.recordLoadedDigests(content) // for the next peer fill of the node (localcontent.go)
	}
	m.content = cacheconfig.FilesToProto(content)
	for _, c := range content {
		if c.SHA256 != "" { // a peer fill's, verified by the peer for this very file
			m.blobs.add(&daemonv1.FileSHA256{Name: c.Name, Sha256: c.SHA256})
		}
	}
	m.policies = cacheconfig.PolicyStrings(d.opts.ContentPolicies)
	g.content, g.manifest, g.started, g.state = content, m, time.Now(), StateServing
	d.reg.mu.Lock()
	defer d.reg.mu.Unlock()
	d.reg.addGenLocked(g)
	m.generation = g.id
	return nil
}

// newGRPCServer builds the daemon.v1 server with peer-credential checks,
// deadlines and limits (connlimit.go), and returns its authorizer for the
// listener's per-uid limits.
func (d *Daemon) newGRPCServer() (*grpc.Server, authorizer) {
	auth := d.authorizer()
	auth.denied = func(method string) {
		if method == daemonv1.Daemon_Attach_FullMethodName {
			d.metrics.AttachFailed(AttachPermissionDenied)
		}
	}
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
// what the daemon holds, and records the new file as
// the daemon's own so that Run's file watch does not take it for lost.
func (d *Daemon) rewriteReady() error {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	var model, digest string
	d.reg.mu.Lock()
	if g := d.reg.primaryLocked(); g != nil && g.state != StatePublishing {
		model, digest = g.model, g.digest
	}
	d.reg.mu.Unlock()
	r := daemonfile.Ready{PID: pid, StartTime: st, DeviceUUID: d.info.DeviceUUID, GPU: d.opts.GPU, Socket: d.info.Paths.Socket,
		Backend: d.info.Backend, Model: model, ConfigDigest: digest, Version: version.Version,
		CreatedUnixMS: time.Now().UnixMilli()}
	if err := daemonfile.WriteReady(d.info.Paths.Ready, r); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}
