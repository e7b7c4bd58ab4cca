package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemon/handover"
	"github.com/wcache/wcache/core/daemon/registry"
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
	// its generations, is the registry's (core/daemon/registry, its own lock).
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

	reg     *holdings
	metrics Metrics
	// attachWaits pairs early descriptor requests with their Attach
	// (attachwait.go).
	attachWaits attachWaits
	srv         *grpc.Server
	lis         *net.UnixListener
	// glis is what the gRPC server accepts on: lis, paused while a
	// successor takes over (handover.Listener).
	glis *handover.Listener
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
	var undo undoStack
	defer func() {
		if err == nil {
			return
		}
		undo.run()
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
	ctx, cancel := cancelOnExit(ctx, plugin)
	defer cancel()
	pluginErr := pluginError(plugin)

	d := &Daemon{opts: opts, plugin: plugin, backend: plugin.Backend(), log: opts.Logger,
		reg: registry.New[*manifest, *handleFiles](), metrics: noMetrics{}, serveErr: make(chan error, 1), stopCh: make(chan struct{})}
	if err := d.identify(ctx, pluginErr); err != nil {
		return nil, err
	}
	if err := d.capFromFraction(ctx); err != nil {
		return nil, pluginErr("memory cap", err)
	}
	startPlan := time.Now()
	jobs, err := d.prepareAll(ctx, pluginErr)
	if err != nil {
		return nil, err
	}
	planDone := time.Since(startPlan)
	took, replaced, err := d.takeOverIfAsked(ctx, jobs, &undo, pluginErr)
	if err != nil {
		return nil, err
	}
	if took != nil || replaced {
		jobs = nil // nothing to load: the memory is here
	}
	if err := d.acquireIdentity(ctx, took != nil || replaced, &undo); err != nil {
		return nil, err
	}
	locked := time.Since(startPlan) - planDone
	undo.push(func() { d.freeAll() })
	if err := d.installGenerations(ctx, jobs, took, planDone, locked, pluginErr); err != nil {
		return nil, err
	}
	if err := d.listen(&undo); err != nil {
		return nil, err
	}
	d.info.StartDuration = time.Since(begin)
	d.serveGRPC(&undo)
	if err := d.servePeers(took, &undo); err != nil {
		return nil, err
	}
	if err := d.announceReady(); err != nil {
		return nil, err
	}
	if took != nil {
		d.tellPredecessorServing(took)
	}
	d.log.Info("ready", "socket", d.info.Paths.Socket, "generations", d.reg.Count(), "device_bytes", d.HeldBytes())
	return d, nil
}

// undoStack is what Start did, undone in reverse order when it fails.
type undoStack []func()

func (u *undoStack) push(f func()) { *u = append(*u, f) }

func (u undoStack) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// cancelOnExit is ctx cancelled when plugin exits (until cancel).
func cancelOnExit(ctx context.Context, plugin Plugin) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-plugin.Exited():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// pluginError wraps a failed step's err, as ErrPluginExited (with the
// plugin's exit) when plugin has exited.
func pluginError(plugin Plugin) func(what string, err error) error {
	return func(what string, err error) error {
		select {
		case <-plugin.Exited():
			return fmt.Errorf("%s: %w: %v", what, ErrPluginExited, plugin.ExitError())
		default:
			return fmt.Errorf("%s: %w", what, err)
		}
	}
}

// identify asks the backend its name and the device's UUID, validates
// the UUID, and names the daemon's files and metrics after it.
func (d *Daemon) identify(ctx context.Context, pluginErr func(string, error) error) error {
	binfo, err := d.backend.Info(ctx)
	if err != nil {
		return pluginErr("backend info", err)
	}
	d.info.Backend = binfo.Name
	uuid, err := d.backend.DeviceUUID(ctx, d.opts.GPU)
	if err != nil {
		return pluginErr(fmt.Sprintf("device UUID of GPU %d", d.opts.GPU), err)
	}
	if err := paths.ValidateDeviceUUID(uuid); err != nil {
		return fmt.Errorf("backend %s returned an unusable UUID for GPU %d: %w", binfo.Name, d.opts.GPU, err)
	}
	d.info.DeviceUUID = uuid
	d.log = d.log.With("device", uuid)
	if d.info.Paths, err = d.opts.Layout.For(uuid); err != nil {
		return err
	}
	if d.opts.Metrics != nil {
		m, err := d.opts.Metrics(uuid)
		if err != nil {
			return fmt.Errorf("metrics of device %s: %w", uuid, err)
		}
		if m != nil {
			d.metrics = m
		}
	}
	return nil
}

// prepareAll opens and plans every model of the options (nothing is
// allocated), refusing two of the same config, and a plan past MaxBytes
// before the lock: a --force start does not end the device's daemon for
// a load that cannot fit.
func (d *Daemon) prepareAll(ctx context.Context, pluginErr func(string, error) error) ([]*loadJob, error) {
	var jobs []*loadJob
	var planned uint64
	for _, src := range d.opts.sources() {
		job, err := d.prepare(ctx, src)
		if err != nil {
			return nil, pluginErr("config", err)
		}
		for _, o := range jobs {
			if o.g.Digest == job.g.Digest {
				return nil, fmt.Errorf("models %s and %s have the same config (%s): load it once", o.src.Model, src.Model, job.g.Digest)
			}
		}
		jobs = append(jobs, job)
		planned += job.pl.AllocatedBytes()
	}
	if limit := d.opts.MaxBytes; limit != 0 && planned > limit {
		return nil, &MemoryError{What: "load", Need: planned, MaxBytes: limit}
	}
	return jobs, nil
}

// takeOverIfAsked takes the memory of the device's live daemon over
// (Options.Takeover; takeOver). took nil: nothing taken — no daemon there
// (start as usual), or replaced set: an empty daemon, which the lock
// replaces. What was taken is given back (the connection closed, so the
// previous daemon takes its lock back) and freed on undo.
func (d *Daemon) takeOverIfAsked(ctx context.Context, jobs []*loadJob, undo *undoStack,
	pluginErr func(string, error) error) (took *takeover, replaced bool, err error) {
	if !d.opts.Takeover {
		return nil, false, nil
	}
	took, err = d.takeOver(ctx, jobs)
	if errors.Is(err, handover.ErrEmptyPredecessor) {
		d.log.Info("takeover: replacing an empty daemon (stopping it), starting as usual", "reason", err.Error())
		took, err, replaced = nil, nil, true
	}
	if err != nil {
		return nil, false, pluginErr("takeover", err)
	}
	if took == nil && !replaced {
		d.log.Info("takeover: no daemon on the device's socket, starting as usual")
		return nil, false, nil
	}
	undo.push(func() {
		if took == nil {
			return // an empty daemon replaced
		}
		// Closing the connection makes the previous daemon take its lock back.
		took.Finish()
		if !took.adopted { // else freeAll does it
			for _, tg := range took.gens {
				d.freeAllocs(tg.IDs)
				tg.manifest.files.close()
			}
		}
	})
	return took, replaced, nil
}

// acquireIdentity takes the device's identity lock (daemonfile.Acquire: a
// live daemon is *daemonfile.LiveDaemonError unless Force), released on
// undo. replacing: a daemon taken over, or an empty one replaced, which
// exits by itself once it handed over; the lock waits for it (and ends
// it, should it linger) as Force does.
func (d *Daemon) acquireIdentity(ctx context.Context, replacing bool, undo *undoStack) error {
	opts := d.opts
	lock, res, err := daemonfile.Acquire(ctx, d.info.Paths, daemonfile.CleanupOptions{
		Force: opts.Force || replacing, Grace: opts.TakeoverGrace, Wait: opts.TakeoverWait,
		Logf: func(format string, args ...any) { d.log.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return fmt.Errorf("device %s: %w", d.info.DeviceUUID, err)
	}
	d.lock, d.info.Cleanup = lock, res
	undo.push(func() {
		if err := lock.Release(); err != nil {
			d.log.Warn("releasing the lock", "error", err)
		}
	})
	return nil
}

// installGenerations loads every job (the files, or a peer) and adopts
// what was taken over, records their load statistics, seals what they
// hold against writes and reports the memory held.
func (d *Daemon) installGenerations(ctx context.Context, jobs []*loadJob, took *takeover, planDone, locked time.Duration,
	pluginErr func(string, error) error) error {
	d.started = time.Now()
	for _, job := range jobs {
		if err := d.loadGeneration(ctx, job, d.info.DeviceUUID, d.info.Backend); err != nil {
			return pluginErr("load", err)
		}
		job.g.Load.Plan, job.g.Load.Lock = planDone, locked
		d.metrics.Loaded(job.g.Load, job.g.Tensors)
	}
	if took != nil {
		d.adopt(took, planDone, locked)
		for _, tg := range took.gens {
			d.metrics.Loaded(tg.g.Load, tg.g.Tensors)
		}
	}
	d.started = time.Now()
	for _, g := range d.reg.All() {
		// Loaded or taken over: no client may write the memory.
		if err := d.sealWrites(g.Manifest, true); err != nil {
			return err
		}
	}
	d.reportHeld()
	d.reg.SetMetrics(d.metrics)
	return nil
}

// listen listens on the device's socket and its descriptor channel (and
// serves the channel), both removed on undo.
func (d *Daemon) listen(undo *undoStack) error {
	var err error
	if d.lis, err = ListenUnix(d.info.Paths.Socket, d.opts.SocketGID); err != nil {
		return err
	}
	undo.push(func() {
		d.lis.Close()
		if err := os.Remove(d.info.Paths.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("removing the socket", "error", err)
		}
	})
	if d.fdLis, err = d.listenFDChannel(); err != nil {
		return err
	}
	undo.push(func() {
		d.fdLis.Close()
		if err := os.Remove(fdchannel.Path(d.info.Paths.Socket)); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("removing the descriptor channel", "error", err)
		}
	})
	go d.serveFDChannel(d.fdLis)
	return nil
}

// serveGRPC serves the daemon's gRPC service on the socket (through the
// handover listener and the peer-credential check), stopped on undo.
func (d *Daemon) serveGRPC(undo *undoStack) {
	var auth authorizer
	d.srv, auth = d.newGRPCServer()
	d.glis = handover.NewListener(d.lis)
	lis := newPeerListener(d.glis, auth.allows, d.log)
	go func() { d.serveErr <- d.srv.Serve(lis) }()
	undo.push(func() { d.srv.Stop() })
}

// servePeers starts the peer endpoint before the ready file (and so
// before "serving"): the peer port listens — on the previous daemon's
// socket, passed with "released", or our own — when a client or the
// previous daemon sees this one ready. It is stopped on undo.
func (d *Daemon) servePeers(took *takeover, undo *undoStack) error {
	var inherited *os.File
	if took != nil {
		inherited, took.PeerListener = took.PeerListener, nil
	}
	if err := d.startPeerServer(inherited); err != nil {
		return err
	}
	undo.push(d.stopPeerServer)
	return nil
}

// announceReady writes the ready file and records the socket, channel and
// ready file as the daemon's own, so that shutdown removes only these very
// files, and Run notices when they are gone.
func (d *Daemon) announceReady() error {
	if err := d.writeReady(); err != nil {
		return err
	}
	return d.ownFiles()
}

// tellPredecessorServing says "serving" to the daemon taken over and
// closes the takeover connection. That daemon ends its leases and exits
// only once it has seen this one hold the lock, listen and name itself in
// the ready file (daemonfile.VerifySuccessor): until then it keeps its
// memory and takes its lock back.
func (d *Daemon) tellPredecessorServing(took *takeover) {
	if err := took.Conn.Serving(); err != nil {
		d.log.Warn("takeover: telling the previous daemon that this one serves", "error", err)
	}
	took.Finish()
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
	var g *GenerationInfo
	info.Generations, g = d.reg.Describe()
	if g != nil {
		info.Model, info.Files, info.Config, info.ConfigDigest = g.Model, g.Files, g.Config, g.ConfigDigest
		info.Tensors, info.Load, info.Content = g.Tensors, g.Load, g.Content
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
		fallback := g.Load.FillFallback
		fillCtx := ctx
		if cached != nil {
			fillCtx = sdk.WithoutDigest(ctx)
		}
		handles, err = d.fill(fillCtx, pl, g)
		g.Load.FillFallback = fallback
	}
	if err != nil {
		d.freeAllocs(g.Allocs)
		return err
	}
	g.Planned = 0
	m := newManifest(uuid, backend, g.ConfigProto, g.Digest, 0, pl, handles)
	free := func() {
		d.freeAllocs(g.Allocs)
		m.files.close()
	}
	if !fromPeer {
		if content, err = d.contentOf(ctx, ck, g.Load.Fill.Leaves, cached, &g.Load); err != nil {
			free()
			return err
		}
		g.Load.Fill.Leaves = nil // in Content now
	}
	// After the content digests: the leaves the daemon hashed itself
	// were read by path too.
	if err := unchanged(ck); err != nil {
		free()
		return err
	}
	if d.opts.VerifyLoad && !fromPeer { // a peer fill was verified before it was taken (fillFromPeers)
		if err := d.verifyLoad(ctx, pl, g.Allocs, ck); err != nil {
			free()
			return fmt.Errorf("verify: %w", err)
		}
		d.log.Info("verified the load against the checkpoint", "model", g.Model, "bytes", pl.Bytes)
	}
	if !fromPeer && cached == nil { // cached: every entry is there already
		d.recordLoadedDigests(content) // for the next peer fill of the node (fill.Env.RecordLoadedDigests)
	}
	m.content = cacheconfig.FilesToProto(content)
	for _, c := range content {
		if c.SHA256 != "" { // a peer fill's, verified by the peer for this very file
			m.blobs.add(&daemonv1.FileSHA256{Name: c.Name, Sha256: c.SHA256})
		}
	}
	m.policies = cacheconfig.PolicyStrings(d.opts.ContentPolicies)
	g.Content, g.Manifest, g.Started, g.State = content, m, time.Now(), StateServing
	d.reg.Add(g)
	m.generation = g.ID // before the daemon listens: nothing reads m yet
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
		// A stream runs on one of GOMAXPROCS parked handler goroutines,
		// whose stacks have already grown, instead of a goroutine started
		// for it: ~7 % of a 300-tensor attach's p50 on the 2-core VM
		// (make bench, attach). A stream that finds every worker busy (a
		// held lease keeps its Attach's worker) gets a goroutine of its
		// own, as without workers. The option is marked experimental in
		// grpc-go; without it the daemon only gets slower.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
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
	model, digest := d.reg.PrimaryServed()
	r := daemonfile.Ready{PID: pid, StartTime: st, DeviceUUID: d.info.DeviceUUID, GPU: d.opts.GPU, Socket: d.info.Paths.Socket,
		Backend: d.info.Backend, Model: model, ConfigDigest: digest, Version: version.Version,
		CreatedUnixMS: time.Now().UnixMilli()}
	if err := daemonfile.WriteReady(d.info.Paths.Ready, r); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}
