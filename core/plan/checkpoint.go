package plan

import (
	"fmt"

	"github.com/wcache/wcache/core/safetensors"
)

// OpenCheckpoint opens the checkpoint a daemon loads and a client verifies
// against: with an empty pattern the whole directory dir
// (model.safetensors.index.json honoured, safetensors.OpenCheckpoint);
// otherwise the rank's pre-sharded files inside dir (ShardFiles with r).
// Errors are wrapped with dir; a malformed pattern matches
// ErrInvalidPattern, no matching file ErrNoShards.
func OpenCheckpoint(dir, pattern string, r ShardRanks) (*safetensors.Checkpoint, error) {
	var ck *safetensors.Checkpoint
	var err error
	if pattern == "" {
		ck, err = safetensors.OpenCheckpoint(dir)
	} else {
		var files []string
		if files, err = ShardFiles(dir, pattern, r); err == nil {
			ck, err = safetensors.OpenFiles(files)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return ck, nil
}
