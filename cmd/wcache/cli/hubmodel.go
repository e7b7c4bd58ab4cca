package cli

import (
	"errors"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/hubcache"
	"github.com/wcache/wcache/core/paths"
)

// resolveModel returns the directory --model names: for a hub id
// ("org/name", "org/name@revision") its snapshot in the local Hugging Face
// cache (hubcache.Resolve: HF_HUB_CACHE, HF_HOME, ~/.cache/huggingface/hub;
// no network) even when the working directory holds ./org/name, which only
// "./org/name" names; anything else is a path, itself. An id absent from
// the cache is a usage error (exit 2) naming where it looked, and the
// ./ spelling when a directory of that name is here; "" stays "".
func resolveModel(model string) (string, error) {
	if model == "" {
		return "", nil
	}
	dir, err := hubcache.Resolve(model, nil)
	if errors.Is(err, hubcache.ErrNotCached) {
		return "", withCode(ExitUsage, err)
	}
	return dir, err
}

// resolveWithModel is f.resolve for a command whose --model must be given:
// *model becomes the directory it names (resolveModel); empty, it is a
// usage error, "--model is required" and why.
func (f *cacheFlags) resolveWithModel(model *string, why string) (paths.Layout, cacheconfig.Config, error) {
	layout, cfg, err := f.resolve()
	if err == nil && *model == "" {
		err = usageErrorf("--model is required%s", why)
	}
	if err == nil {
		*model, err = resolveModel(*model)
	}
	return layout, cfg, err
}
