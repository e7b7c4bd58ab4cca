package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/launcher"
	"github.com/wcache/wcache/core/paths"
)

// configFlags are the CacheConfig flags shared by serve, launch and attach.
// Their defaults are cacheconfig.Default(): a single GPU, unquantized.
type configFlags struct {
	c     cacheconfig.Config
	extra []string
	fs    *pflag.FlagSet
}

// addConfigFlags registers the CacheConfig flags on fs.
func addConfigFlags(fs *pflag.FlagSet) *configFlags {
	f := &configFlags{c: cacheconfig.Default(), fs: fs}
	c := &f.c
	fs.Uint32Var(&c.TPSize, "tp-size", c.TPSize, "tensor-parallel size")
	fs.Uint32Var(&c.TPRank, "tp-rank", c.TPRank, "tensor-parallel rank")
	fs.Uint32Var(&c.PPSize, "pp-size", c.PPSize, "pipeline-parallel size")
	fs.Uint32Var(&c.PPRank, "pp-rank", c.PPRank, "pipeline-parallel rank")
	fs.Uint32Var(&c.DPSize, "dp-size", c.DPSize, "data-parallel size")
	fs.Uint32Var(&c.DPRank, "dp-rank", c.DPRank, "data-parallel rank")
	fs.Uint32Var(&c.EPSize, "ep-size", c.EPSize, "expert-parallel size")
	fs.Uint32Var(&c.EPRank, "ep-rank", c.EPRank, "expert-parallel rank")
	fs.StringVar(&c.DType, "dtype", c.DType, "weight dtype as the engine uses it (e.g. bf16, auto)")
	fs.StringVar(&c.Quantization, "quantization", c.Quantization, "quantization method (none for unquantized)")
	fs.StringVar(&c.QuantizationConfigDigest, "quantization-config-digest", c.QuantizationConfigDigest,
		"digest of the quantization configuration")
	fs.StringVar(&c.Revision, "revision", c.Revision, "model revision (e.g. a hub commit)")
	fs.StringVar(&c.ModelArch, "model-arch", c.ModelArch, "model architecture (e.g. LlamaForCausalLM)")
	fs.StringArrayVar(&f.extra, "extra", nil, "engine-specific KEY=VALUE (repeatable)")
	fs.StringVar(&c.EngineName, "engine-name", c.EngineName, "engine name (e.g. sglang, vllm)")
	fs.StringVar(&c.EngineVersion, "engine-version", c.EngineVersion, "engine version")
	fs.StringVar(&c.DeviceCapability, "device-capability", c.DeviceCapability,
		"device capability (e.g. 9.0); empty: the backend's value for the GPU")
	return f
}

// layoutGiven reports whether any parallel-layout flag (--tp-size,
// --tp-rank, --pp-*, --dp-*, --ep-*) was given.
func (f *configFlags) layoutGiven() bool {
	for _, name := range []string{"tp-size", "tp-rank", "pp-size", "pp-rank", "dp-size", "dp-rank", "ep-size", "ep-rank"} {
		if f.fs != nil && f.fs.Changed(name) {
			return true
		}
	}
	return false
}

// config returns the configured CacheConfig (Model and CheckpointDigest
// are left for the caller, who validates the final config). A malformed --extra or an inconsistent layout
// (rank >= size, a zero size) is a usage error (exit 2).
func (f *configFlags) config() (cacheconfig.Config, error) {
	c := f.c
	if len(f.extra) > 0 {
		c.Extra = make(map[string]string, len(f.extra))
		for _, kv := range f.extra {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return cacheconfig.Config{}, usageErrorf("--extra %q: want KEY=VALUE", kv)
			}
			if _, dup := c.Extra[k]; dup {
				return cacheconfig.Config{}, usageErrorf("--extra %s given twice", k)
			}
			c.Extra[k] = v
		}
	}
	// A rank without its size is the likelier mistake than a rank too big
	// for a size of 1: say that the size is missing.
	for _, p := range []struct {
		rank, size string
		r          uint32
	}{{"tp-rank", "tp-size", c.TPRank}, {"pp-rank", "pp-size", c.PPRank}, {"dp-rank", "dp-size", c.DPRank}, {"ep-rank", "ep-size", c.EPRank}} {
		if f.fs != nil && f.fs.Changed(p.rank) && !f.fs.Changed(p.size) && p.r > 0 {
			return cacheconfig.Config{}, usageErrorf("--%s %d needs --%s (%s must be below %s, which defaults to 1)", p.rank, p.r, p.size, strings.ReplaceAll(p.rank, "-", "_"), strings.ReplaceAll(p.size, "-", "_"))
		}
	}
	// A misspelt dtype would only ever miss: refuse it with the vocabulary.
	if !cacheconfig.KnownDType(c.DType) {
		return cacheconfig.Config{}, usageErrorf("--dtype %q is not a dtype this version knows; use one of %s (aliases such as bfloat16, float16, half, torch.bfloat16 are accepted)",
			c.DType, strings.Join(cacheconfig.DTypeSpellings(), ", "))
	}
	// Sizes beyond any machine: the same bound as launch's topology.
	for _, p := range []struct {
		name string
		v    uint32
	}{{"tp-size", c.TPSize}, {"pp-size", c.PPSize}, {"dp-size", c.DPSize}, {"ep-size", c.EPSize}} {
		if p.v > launcher.MaxSize {
			return cacheconfig.Config{}, withCode(ExitUsage, &launcher.TopologyError{Field: p.name,
				Reason: fmt.Sprintf("%d is more than %d", p.v, launcher.MaxSize)})
		}
	}
	// Validate the layout now (a usage error); what names the weights is
	// the caller's to fill in.
	v := c
	if v.Model == "" && v.CheckpointDigest == "" {
		v.Model = "unset"
	}
	if err := v.Validate(); err != nil {
		return cacheconfig.Config{}, withCode(ExitUsage, fmt.Errorf("config flags: %w", err))
	}
	return c, nil
}

// cacheFlags are the flags of a command that runs or reaches a daemon
// under a CacheConfig (serve, attach, publish): the backend, the
// CacheConfig and the path layout, registered in that order.
type cacheFlags struct {
	backend *backendFlags
	config  *configFlags
	layout  *layoutFlags
}

// addCacheFlags registers the backend, CacheConfig and layout flags on fs.
func addCacheFlags(fs *pflag.FlagSet) *cacheFlags {
	return &cacheFlags{backend: addBackendFlags(fs), config: addConfigFlags(fs), layout: addLayoutFlags(fs)}
}

// resolve returns the path layout and the CacheConfig the flags name,
// checked without touching the system: a bad template or an inconsistent
// config is a usage error (exit 2) before any file is created.
func (f *cacheFlags) resolve() (paths.Layout, cacheconfig.Config, error) {
	layout, err := f.layout.layout()
	if err != nil {
		return paths.Layout{}, cacheconfig.Config{}, err
	}
	cfg, err := f.config.config()
	if err != nil {
		return paths.Layout{}, cacheconfig.Config{}, err
	}
	return layout, cfg, nil
}
