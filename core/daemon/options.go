package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/internal/defaults"
	"github.com/wcache/wcache/sdk"
)

// Plugin is what the daemon needs of a started backend: the backend itself
// and its process's life. *pluginhost.Plugin implements it; tests pass an
// in-process backend with a channel they close to simulate a crash.
type Plugin interface {
	// Backend is the device backend.
	Backend() sdk.Backend
	// Exited is closed when the backend process has exited.
	Exited() <-chan struct{}
	// ExitError explains the exit once Exited is closed.
	ExitError() error
	// Close ends the backend process; device memory it held is released.
	Close() error
}

// Defaults of Options.
const (
	DefaultDrainTimeout     = 30 * time.Second
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
	// DefaultFreeTimeout bounds freeing the allocations at shutdown.
	DefaultFreeTimeout = 30 * time.Second
	// DefaultPublishTimeout bounds a publish from its begin to its commit.
	DefaultPublishTimeout = 10 * time.Minute
	// MaxStopTimeout caps the drain timeout a Stop request may ask for.
	MaxStopTimeout = 10 * time.Minute
	// gracefulStopTimeout bounds waiting for in-flight RPCs at shutdown
	// before connections are closed.
	gracefulStopTimeout = 5 * time.Second
	// connectionTimeout bounds a new connection's handshake.
	connectionTimeout = 5 * time.Second
	// maxRecvMsgSize bounds a request: requests carry a config, not data.
	maxRecvMsgSize = 1 << 20
)

// Options configure a daemon. GPU and Layout are required; without Model the
// daemon starts empty and waits for a Publish.
type Options struct {
	// GPU is the device ordinal as this process (and the plugin it started)
	// sees it: CUDA_VISIBLE_DEVICES and friends apply.
	GPU int
	// Model is the checkpoint directory. Empty: the daemon holds nothing
	// until a client publishes (see Publish in docs/protocol.md).
	Model string
	// ShardPattern, when set, selects pre-sharded per-rank files inside
	// Model (plan.ShardFiles), e.g. "model-rank-{tp_rank}-part-*.safetensors",
	// expanded with Config's ranks. Empty: the whole checkpoint
	// (model.safetensors.index.json honoured).
	ShardPattern string
	// Config is the identity of what the daemon holds. The daemon fills in
	// CheckpointDigest (always, from the files it loads), Model (when empty:
	// the cleaned Model path), DeviceCapability (when empty: the backend's
	// capability of the device) and ProtocolVersion (when 0).
	Config cacheconfig.Config
	// Models are more checkpoints to load at start, each a generation of
	// its own beside Model's (a target and a draft model, co-located
	// models), in this order; each Source's Config is completed as Config
	// is. A checkpoint whose completed config equals another's is refused.
	Models []Source
	// Layout names the daemon's files from its device UUID.
	Layout paths.Layout
	// KeepLayout makes an empty daemon (no Model) keep Config's parallel
	// layout (cacheconfig.Config.ParallelLayout): Status shows it while the
	// daemon is empty, and a Publish whose layout fields differ is refused
	// with FAILED_PRECONDITION and a ConfigMismatch detail naming them, so
	// that an engine rank placed on another rank's GPU cannot take its
	// daemon over. serve sets it when given any layout flag (wcache launch
	// passes --tp-size, --tp-rank, --pp-size and --pp-rank). false: an
	// empty daemon accepts any layout.
	KeepLayout bool
	// Plan tunes the arena plan (zero: 16 GiB arenas, 4096-byte alignment).
	Plan plan.Options
	// MaxBytes caps the device memory the daemon may hold: the sum of its
	// arenas' sizes, a publish in progress included. A load or a publish
	// whose plan would pass it is refused before anything is allocated
	// (*MemoryError; RESOURCE_EXHAUSTED for a publish). 0 (the default):
	// no cap but the device's free memory.
	MaxBytes uint64
	// MaxFraction, when above 0 (at most 1), sets MaxBytes to this
	// fraction of the device's total memory as the backend reports it
	// (serve --max-bytes 80%); Start fails when the backend reports none.
	// It excludes MaxBytes.
	MaxFraction float64
	// ReserveBytes is device memory a load or a publish must leave free,
	// for the engine's context and kernels: one whose plan needs more than
	// the device's free memory less ReserveBytes is refused the same way.
	// It applies only when the backend reports free memory
	// (sdk.Device.FreeMemory non-zero). Default 0: the free memory itself
	// is the limit.
	ReserveBytes uint64

	// Force takes over a live daemon of the same device (TERM, grace, KILL)
	// instead of refusing with *daemonfile.LiveDaemonError.
	Force bool
	// Takeover receives the memory of the live daemon of the device
	// instead of loading (serve --takeover): over its descriptor channel,
	// without reading a tensor byte; that daemon then ends its leases (the
	// clients' mappings stay valid) and exits. With Model, its weights must
	// be Model's (the attach compares the configs); without, whatever it
	// serves is taken. Its handles must be descriptors (else ErrNoTakeover,
	// and it is left alone). No daemon there: a normal start.
	Takeover bool
	// TakeoverGrace and TakeoverWait tune the takeover (daemonfile
	// defaults when zero: 10 s and 30 s).
	TakeoverGrace, TakeoverWait time.Duration

	// DrainTimeout is how long a Stop without an explicit timeout, and a
	// cancelled Run, wait for leases (default 30 s).
	DrainTimeout time.Duration
	// AllowUIDs and AllowGIDs widen who may connect: by default only peers
	// running as the daemon's own effective uid. Root is not implicitly
	// allowed (unless the daemon itself runs as root).
	AllowUIDs, AllowGIDs []uint32
	// SocketGID, when set, makes the socket group-owned by this gid with
	// mode 0660, so that clients of other users in that group can reach it
	// at all (the directory must let them through too). nil: mode 0600,
	// the daemon's user only. Reaching the socket is not enough: the peer
	// must also pass AllowUIDs/AllowGIDs.
	SocketGID *uint32

	// Progress, when set, receives load progress over all allocations
	// (bytes done, bytes total). It is called from the goroutines loading
	// the arenas (all at once), one call at a time.
	Progress func(done, total uint64)
	// Logger receives the daemon's log lines (nil: discarded).
	Logger hclog.Logger
	// Metrics, when set, makes the sink of the daemon's operational events
	// (load, attaches and their failures, lease count, state); Start calls
	// it once with the device UUID. nil: nothing is recorded.
	// core/metrics implements it for Prometheus.
	Metrics MetricsFactory

	// RestartPlugin, when set, starts a replacement for a backend plugin
	// that exited while the daemon serves descriptor handles (memfd,
	// cuda-vmm-fd): the daemon holds a descriptor of every allocation, the
	// new plugin imports them, and the same generation is served without
	// reading the disk. nil, or name handles (cuda-ipc, posix-shm): a plugin
	// exit is fatal (invariant 8, docs/architecture.md).
	RestartPlugin func(ctx context.Context) (Plugin, error)
	// RestartBackoff is the wait before the second plugin restart within
	// PluginRestartWindow; each further one waits twice as long (at most
	// MaxRestartBackoff), and after MaxPluginRestarts restarts within the
	// window the daemon gives up as for a fatal plugin exit (a crash
	// loop). The first restart is immediate. 0: DefaultRestartBackoff.
	RestartBackoff time.Duration

	// VerifyLoad makes Start compare, after the load, the SHA-256 of every
	// file extent in device memory (the backend's Digest) with the file's
	// bytes read through a descriptor proven to be the file whose header
	// was digested; a difference fails Start with ErrLoadMismatch. It reads
	// the checkpoint a second time. Without it Start still refuses files
	// whose inode, size or times changed during the load.
	VerifyLoad bool
	// ContentPolicies are the content policies (cacheconfig.Policy) the
	// daemon's clients may use, served in the manifest; nil means
	// cacheconfig.DefaultDaemonPolicies ("identity" and "hash": "headers",
	// which does not look at tensor bytes, only when named).
	ContentPolicies []cacheconfig.Policy

	// VerifyPublish makes a publish's commit carry a SHA-256 per tensor,
	// checked through the backend's Digest before the weights are served.
	VerifyPublish bool
	// PublishTimeout bounds a publish from its first message to its commit
	// (default 10 min); a publisher slower than that is aborted and the
	// daemon is empty again.
	PublishTimeout time.Duration

	// Peer configures cross-node peer fill: an endpoint serving the
	// daemon's generations to other daemons, and the peers a load asks
	// before the files (fill.PeerOptions). The zero value: neither.
	Peer PeerOptions

	// PeerFill says whether a file load first tries to fill from a peer
	// holding the same weights (docs/peer-fill.md): PeerFillAuto (the
	// default, "") tries a sibling daemon of the same user on this node,
	// then other nodes' daemons, and reads the files when none fills;
	// PeerFillOff reads the files. A peer fill that fails is logged and
	// recorded in Status (fill_fallback); the files are read then.
	PeerFill string
	// DigestCache, when set, is the user's digest cache (client.DigestCache).
	// A peer fill (same node or across nodes) proves the bytes it copied
	// against what the local files hold: the cache's digest of each file's
	// identity, else a trusted hub blob name, else the file hashed while
	// the bytes are copied (its digest then stored here); bytes that are
	// not the files' are refused and the files read (docs/peer-fill.md,
	// "What a fill proves"). Every load from the files stores its files'
	// digests here, so a second daemon of the node proves its fill without
	// reading them, and a load of files whose every digest is here (a
	// restart) hashes nothing (digestsInCache). nil: nothing is looked up
	// or stored (fills and loads hash the files). serve passes the default
	// one.
	DigestCache *client.DigestCache

	// KeepaliveTime and KeepaliveTimeout: the daemon pings a silent client
	// connection after KeepaliveTime and closes it (ending its lease) when
	// the ping is not answered within KeepaliveTimeout, so a dead or stopped
	// client cannot hold a lease forever (defaults 10 s and 5 s).
	KeepaliveTime, KeepaliveTimeout time.Duration
}

// Source is a checkpoint the daemon loads at start, as one generation:
// Model, ShardPattern and Config as in Options.
type Source struct {
	Model        string
	ShardPattern string
	Config       cacheconfig.Config
}

// sources are the checkpoints to load at start: Model's (when set), then
// Models.
func (o Options) sources() []Source {
	var out []Source
	if o.Model != "" {
		out = append(out, Source{Model: o.Model, ShardPattern: o.ShardPattern, Config: o.Config})
	}
	return append(out, o.Models...)
}

// withDefaults fills zero fields and checks required ones.
func (o Options) withDefaults() (Options, error) {
	o.Models = slices.Clone(o.Models)
	for i, s := range o.Models {
		if s.Model == "" {
			return o, fmt.Errorf("daemon: model %d of Models has no directory", i+1)
		}
		abs, err := filepath.Abs(s.Model)
		if err != nil {
			return o, fmt.Errorf("daemon: model directory %s: %w", s.Model, err)
		}
		o.Models[i].Model = abs
	}
	if o.Model != "" {
		// The backend plugin reads the files itself, and a plugin need not
		// run in the daemon's working directory: it is always given
		// absolute paths.
		abs, err := filepath.Abs(o.Model)
		if err != nil {
			return o, fmt.Errorf("daemon: model directory %s: %w", o.Model, err)
		}
		o.Model = abs
	} else if o.ShardPattern != "" {
		return o, fmt.Errorf("daemon: a shard pattern without a model directory")
	}
	if o.GPU < 0 {
		return o, fmt.Errorf("daemon: GPU ordinal %d is negative", o.GPU)
	}
	if o.MaxFraction < 0 || o.MaxFraction > 1 || (o.MaxFraction > 0 && o.MaxBytes != 0) {
		return o, fmt.Errorf("daemon: MaxFraction %g: want 0 to 1, and not with MaxBytes", o.MaxFraction)
	}
	if o.Layout.Socket.IsZero() || o.Layout.Ready.IsZero() {
		return o, fmt.Errorf("daemon: no path layout")
	}
	switch o.PeerFill {
	case "":
		o.PeerFill = PeerFillAuto
	case PeerFillAuto, PeerFillOff:
	default:
		return o, fmt.Errorf("daemon: peer fill mode %q: want %q or %q", o.PeerFill, PeerFillAuto, PeerFillOff)
	}
	defaults.Positive(&o.DrainTimeout, DefaultDrainTimeout)
	defaults.Positive(&o.PublishTimeout, DefaultPublishTimeout)
	defaults.Positive(&o.KeepaliveTime, DefaultKeepaliveTime)
	defaults.Positive(&o.KeepaliveTimeout, DefaultKeepaliveTimeout)
	defaults.Positive(&o.RestartBackoff, DefaultRestartBackoff)
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if err := o.Peer.Check(); err != nil {
		return o, err
	}
	return o, nil
}
