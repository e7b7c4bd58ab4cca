package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
)

// ErrLoadMismatch: with Options.VerifyLoad, device memory differs from the
// checkpoint bytes it was loaded from.
var ErrLoadMismatch = errors.New("loaded bytes differ from the checkpoint")

// verifyLoad (Options.VerifyLoad) hashes what the backend holds and what
// the checkpoint holds, extent by extent, and fails with ErrLoadMismatch
// naming the file where they differ. The file bytes are read through a
// descriptor proven to be the file whose header was digested
// (safetensors.File.OpenUnchanged), so a file swapped or rewritten during
// the load cannot pass, within the timestamps' granularity or not. It
// reads the whole checkpoint once more (from the page cache, mostly).
func (d *Daemon) verifyLoad(ctx context.Context, pl *plan.Plan, ids []sdk.AllocationID, ck *safetensors.Checkpoint) error {
	byPath := make(map[string]*safetensors.File, len(ck.Files))
	for _, f := range ck.Files {
		byPath[f.Path] = f
	}
	for ai, a := range pl.Allocations {
		ranges := make([]sdk.Range, len(a.Extents))
		for i, e := range a.Extents {
			ranges[i] = sdk.Range{Offset: e.DestOffset, Length: e.Length}
		}
		sums, err := d.backend.Digest(ctx, ids[ai], ranges)
		if err != nil {
			return fmt.Errorf("verify the load: digest of arena %d: %w", ai+1, err)
		}
		if len(sums) != len(ranges) {
			return fmt.Errorf("verify the load: arena %d: the backend returned %d digests for %d ranges", ai+1, len(sums), len(ranges))
		}
		for i, e := range a.Extents {
			f, ok := byPath[e.Path]
			if !ok {
				return fmt.Errorf("verify the load: extent of %s, which is not a checkpoint file", e.Path)
			}
			want, err := fileDigest(f, e)
			if err != nil {
				return fmt.Errorf("verify the load: %w", err)
			}
			if !bytes.Equal(want[:], sums[i][:]) {
				return fmt.Errorf("%w: %s [%d, +%d): SHA-256 in memory %x, in the file %x",
					ErrLoadMismatch, e.Path, e.FileOffset, e.Length, sums[i], want)
			}
		}
	}
	return nil
}

// fileDigest is the SHA-256 of extent e of checkpoint file f, read through
// a descriptor of that very file.
func fileDigest(f *safetensors.File, e sdk.Extent) ([32]byte, error) {
	fd, err := f.OpenUnchanged()
	if err != nil {
		return [32]byte{}, err
	}
	defer fd.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(fd, int64(e.FileOffset), int64(e.Length))); err != nil {
		return [32]byte{}, fmt.Errorf("read %s: %w", f.Path, err)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}
