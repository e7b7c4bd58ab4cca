package cacheconfig

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/wcache/wcache/core/safetensors"
)

// CheckpointDigest identifies the weights of a checkpoint by its headers:
// "sha256:" and the lowercase hex SHA-256 of, for each file in base-name
// order (byte order),
//
//	<len(basename)>:<basename><len(header)>:<header>
//
// where header is the file's raw header (the N bytes after the length
// prefix, padding included) and lengths are decimal byte counts. It reads no
// tensor byte, so it is cheap, and it does not depend on the directory: the
// same files elsewhere give the same digest, and any change to a header
// (dtype, shape, offsets, names, metadata) or to a file name changes it.
// Tensor bytes are not covered. A nil or empty checkpoint digests the empty
// input.
func CheckpointDigest(ck *safetensors.Checkpoint) string {
	h := sha256.New()
	if ck != nil {
		files := slices.Clone(ck.Files)
		slices.SortFunc(files, func(a, b *safetensors.File) int {
			return cmp.Compare(filepath.Base(a.Path), filepath.Base(b.Path))
		})
		var b []byte
		for _, f := range files {
			b = appendLenPrefixed(b[:0], filepath.Base(f.Path))
			b = strconv.AppendInt(b, int64(len(f.RawHeader)), 10)
			b = append(b, ':')
			h.Write(b)
			h.Write(f.RawHeader)
		}
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// CheckpointDigestDir opens the checkpoint in dir with
// safetensors.OpenCheckpoint (so only the shards an index names count, and
// every file is validated) and returns its CheckpointDigest.
func CheckpointDigestDir(dir string) (string, error) {
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return "", fmt.Errorf("checkpoint digest: %w", err)
	}
	return CheckpointDigest(ck), nil
}

// WithCheckpoint returns c naming the checkpoint ck opened from the folder
// model, as the daemon (serve) and its clients (attach, publish) compute
// it alike: CheckpointDigest is CheckpointDigest(ck), and Model, when c
// names none, is model cleaned (filepath.Clean), so that "dir/" and "dir"
// are one identity.
func (c Config) WithCheckpoint(model string, ck *safetensors.Checkpoint) Config {
	c.CheckpointDigest = CheckpointDigest(ck)
	if c.Model == "" {
		c.Model = filepath.Clean(model)
	}
	return c
}
