package cli

import (
	"errors"

	"github.com/wcache/wcache/core/hubcache"
)

// resolveModel returns the directory --model names: itself, or for a hub
// id ("org/name", "org/name@revision") that is not a directory here, its
// snapshot in the local Hugging Face cache (hubcache.Resolve: HF_HUB_CACHE,
// HF_HOME, ~/.cache/huggingface/hub; no network). An id absent from the
// cache is a usage error (exit 2) naming where it looked; "" stays "".
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
