package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/metrics"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/sdk"
)

// serveFlags are the flags of wcache serve, as the user gave them.
type serveFlags struct {
	cache        *cacheFlags
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
}

// registerServeFlags registers serve's flags on fs: the backend, CacheConfig
// and layout flags first (addCacheFlags), then serve's own.
func registerServeFlags(fs *pflag.FlagSet) *serveFlags {
	f := &serveFlags{cache: addCacheFlags(fs)}
	fs.IntVar(&f.gpu, "gpu-id", -1, "GPU ordinal as this process sees it (CUDA_VISIBLE_DEVICES applies)")
	fs.StringArrayVar(&f.models, "model", nil, "checkpoint directory (safetensors), or a hub id org/name[@revision] in the local Hugging Face cache "+
		"(an id even when ./org/name exists: write ./org/name for that directory); "+
		"repeat for several models (one generation each); none: start empty and wait for a publish")
	fs.StringArrayVar(&f.drafts, "draft-model", nil, "a speculative-decoding draft model loaded beside --model as a generation of its own "+
		"(same forms as --model; repeatable)")
	f.publish.add(fs)
	fs.StringVar(&f.shardPattern, "shard-pattern", "",
		"pre-sharded per-rank files inside --model, e.g. 'model-rank-{tp_rank}-part-*.safetensors'")
	fs.BoolVar(&f.force, "force", false, "terminate a live daemon of the same GPU and take over (reloading the weights)")
	fs.BoolVar(&f.takeover, "takeover", false,
		"receive the memory of a live daemon of the same GPU over its descriptor channel and serve the same "+
			"generation without reloading (descriptor handles only, e.g. the mock's memfd); it then exits")
	fs.StringSliceVar(&f.contentPolicies, "content-policies", cacheconfig.PolicyStrings(cacheconfig.DefaultDaemonPolicies),
		"content policies clients may use (identity, hash, headers): without headers an attach must prove the files it "+
			"would load (one that names none is refused); add headers to also answer attaches on headers alone (unsafe for fine-tunes)")
	fs.StringVar(&f.peerFill, "peer-fill", daemon.PeerFillAuto,
		"auto: fill from a daemon that already holds the same weights (a sibling GPU on this node) before reading "+
			"the files, falling back to the files; off: always read the files")
	fs.BoolVar(&f.verifyLoad, "verify", false,
		"after the load, compare the SHA-256 of every file's bytes in device memory with the file (reads the checkpoint twice)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", daemon.DefaultDrainTimeout,
		"how long a stop (or SIGTERM) waits for attached clients to release their leases")
	fs.UintSliceVar(&f.allowUIDs, "allow-uid", nil, "also accept clients running as this uid, as guests: status and attach, never stop, evict or publish (repeatable)")
	fs.UintSliceVar(&f.allowGIDs, "allow-gid", nil, "also accept clients whose primary gid is this, as guests (see --allow-uid; repeatable)")
	fs.StringVar(&f.socketGroup, "socket-group", "",
		"make the socket group-owned by this group (name or gid) with mode 0660, for clients of other users "+
			"(they must also pass --allow-uid/--allow-gid)")
	fs.Uint64Var(&f.maxArena, "max-arena-bytes", plan.DefaultMaxArenaBytes, "largest single device allocation")
	fs.StringVar(&f.maxBytes, "max-bytes", "",
		"cap on the device memory the daemon may hold, every generation summed (e.g. 40GiB, or 80% of the device's "+
			"memory); a load or publish past it is refused before anything is allocated (RESOURCE_EXHAUSTED); empty: no cap "+
			"but the device's free memory")
	fs.StringVar(&f.reserveBytes, "reserve-bytes", "",
		"device memory a load or publish must leave free (e.g. 2GiB), when the backend reports free memory; empty: 0")
	fs.BoolVar(&f.hugePages, "huge-pages", false, "align each file's data to 2 MiB instead of 4 KiB")
	fs.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text",
		"text (with a progress bar while loading when stderr is a terminal) or json (one JSON object per line, no bar)")
	fs.StringVar(&f.metricsAddr, "metrics-listen", "",
		"serve GET /metrics and /healthz on unix:/path (a 0600 socket) or host:port (loopback only, "+
			"unless --metrics-allow-remote); empty: no metrics endpoint")
	f.peers.register(fs)
	fs.BoolVar(&f.metricsAny, "metrics-allow-remote", false,
		"let --metrics-listen use a non-loopback TCP address (the endpoint has no authentication)")
	return f
}

// serveSetup is what the flags resolve to: the daemon's options, its
// logger, and the metrics endpoint (nil without --metrics-listen).
type serveSetup struct {
	opts     daemon.Options
	log      hclog.Logger
	endpoint *metrics.Endpoint
	// model is the first --model, "" when the daemon starts empty.
	model string
}

// options checks the flags and builds the daemon's options. Everything
// that can be checked without touching the system is checked first, in
// flag order, so a bad template or flag creates no file: usage errors
// exit 2. Looking up --socket-group and checking a Unix --metrics-listen
// socket's directory are the only reads of the system.
func (f *serveFlags) options(e *env) (serveSetup, error) {
	layout, cfg, err := f.cache.resolve()
	if err != nil {
		return serveSetup{}, err
	}
	model, more, err := f.sources(cfg)
	if err != nil {
		return serveSetup{}, err
	}
	level, policies, err := f.checkServing()
	if err != nil {
		return serveSetup{}, err
	}
	metricsAt, err := metricsListenAddr(f.metricsAddr, f.metricsAny)
	if err != nil {
		return serveSetup{}, err
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "wcache", Level: level, Output: e.stderr, JSONFormat: f.logFormat == "json"})
	capBytes, capFraction, reserve, err := f.memoryBounds()
	if err != nil {
		return serveSetup{}, err
	}
	opts := daemon.Options{GPU: f.gpu, MaxBytes: capBytes, MaxFraction: capFraction, ReserveBytes: reserve, Model: model, Models: more, ShardPattern: f.shardPattern, Config: cfg, Layout: layout,
		Plan: plan.Options{MaxArenaBytes: f.maxArena}, Force: f.force, Takeover: f.takeover, DrainTimeout: f.drainTimeout, Logger: log,
		VerifyPublish: f.publish.verify, PublishTimeout: f.publish.timeout, VerifyLoad: f.verifyLoad, KeepLayout: f.cache.config.layoutGiven(),
		ContentPolicies: policies, PeerFill: f.peerFill}
	if err := f.peers.apply(&opts); err != nil {
		return serveSetup{}, err
	}
	// The user's digest cache (none without a home): a restart takes its
	// files' digests from it instead of hashing every byte, with or
	// without peer fill, and a peer fill proves its copy against it.
	opts.DigestCache, _ = client.DefaultDigestCache()
	if f.hugePages {
		opts.Plan.FileAlignment = plan.HugePageAlignment
	}
	if err := f.access(&opts); err != nil {
		return serveSetup{}, err
	}
	var endpoint *metrics.Endpoint
	if metricsAt != nil {
		endpoint = metrics.NewEndpoint(*metricsAt, log)
		opts.Metrics = endpoint.Metrics
	}
	return serveSetup{opts: opts, log: log, endpoint: endpoint, model: model}, nil
}

// sources checks --gpu-id and the models and resolves each --model and
// --draft-model (drafts after the models) to a directory. The first is
// the daemon's model; every other becomes a Source under the same flags
// with its own path as its model field. model is "" without --model.
func (f *serveFlags) sources(cfg cacheconfig.Config) (model string, more []daemon.Source, err error) {
	if f.gpu < 0 {
		return "", nil, usageErrorf("--gpu-id is required")
	}
	if len(f.models) == 0 && f.shardPattern != "" {
		return "", nil, usageErrorf("--shard-pattern needs --model")
	}
	if len(f.models) == 0 && len(f.drafts) > 0 {
		return "", nil, usageErrorf("--draft-model needs --model (the target it drafts for)")
	}
	models := append(slices.Clone(f.models), f.drafts...)
	for i, m := range models {
		if m == "" {
			return "", nil, usageErrorf("--model \"\": want a checkpoint directory or a hub id")
		}
		if models[i], err = resolveModel(m); err != nil {
			return "", nil, err
		}
	}
	for i, m := range models {
		if i == 0 {
			model = m
			continue
		}
		c := cfg
		c.Model = ""
		more = append(more, daemon.Source{Model: m, Config: c})
	}
	return model, more, nil
}

// checkServing checks --log-level, --log-format, --content-policies and
// --peer-fill, returning the log level and the parsed policies.
func (f *serveFlags) checkServing() (hclog.Level, []cacheconfig.Policy, error) {
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return 0, nil, usageErrorf("--log-level %q: want trace, debug, info, warn or error", f.logLevel)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return 0, nil, usageErrorf("--log-format %q: want text or json", f.logFormat)
	}
	var policies []cacheconfig.Policy
	for _, p := range f.contentPolicies {
		policy, err := cacheconfig.ParsePolicy(p)
		if err != nil || p == "" {
			return 0, nil, usageErrorf("--content-policies: %q: want identity, hash or headers", p)
		}
		policies = append(policies, policy)
	}
	if f.peerFill != daemon.PeerFillAuto && f.peerFill != daemon.PeerFillOff {
		return 0, nil, usageErrorf("--peer-fill %q: want auto or off", f.peerFill)
	}
	return level, policies, nil
}

// memoryBounds parses --max-bytes (a size, or a percentage of the device's
// memory returned as a fraction) and --reserve-bytes; all zero when unset.
func (f *serveFlags) memoryBounds() (capBytes uint64, capFraction float64, reserve uint64, err error) {
	if pct, ok := strings.CutSuffix(f.maxBytes, "%"); ok {
		v, err := strconv.ParseFloat(pct, 64)
		if err != nil || v <= 0 || v > 100 {
			return 0, 0, 0, usageErrorf("--max-bytes %q: want a percentage above 0 and at most 100 such as 80%%", f.maxBytes)
		}
		capFraction = v / 100
	} else if f.maxBytes != "" {
		if capBytes, err = sdk.ParseSize(f.maxBytes); err != nil || capBytes == 0 {
			return 0, 0, 0, usageErrorf("--max-bytes %q: want a size above 0 such as 40GiB, or a percentage of the device's memory such as 80%%", f.maxBytes)
		}
	}
	if f.reserveBytes != "" {
		if reserve, err = sdk.ParseSize(f.reserveBytes); err != nil {
			return 0, 0, 0, usageErrorf("--reserve-bytes: %v", err)
		}
	}
	return capBytes, capFraction, reserve, nil
}

// access sets who besides the owner may connect: --allow-uid, --allow-gid
// and --socket-group (looked up in the system's group database; an
// unknown group is a usage error).
func (f *serveFlags) access(opts *daemon.Options) error {
	for _, u := range f.allowUIDs {
		opts.AllowUIDs = append(opts.AllowUIDs, uint32(u))
	}
	for _, g := range f.allowGIDs {
		opts.AllowGIDs = append(opts.AllowGIDs, uint32(g))
	}
	if f.socketGroup != "" {
		gid, err := daemon.LookupGroup(f.socketGroup)
		if err != nil {
			return withCode(ExitUsage, fmt.Errorf("--socket-group: %w", err))
		}
		opts.SocketGID = &gid
	}
	return nil
}
