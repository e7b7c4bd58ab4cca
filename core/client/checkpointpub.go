package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk/filedigest"
)

// CheckpointSource reads the tensors of a checkpoint from its files for a
// publish of them as they are (`wcache publish`, the benchmarks). Create it
// with OpenCheckpointPublication; Close closes the files.
type CheckpointSource struct {
	files []*os.File
	srcs  []tensorSource
}

// tensorSource is where one table entry's bytes are.
type tensorSource struct {
	f      *os.File
	path   string
	offset int64
	length int64
}

// OpenCheckpointPublication returns the publication of ck's tensors under
// cfg, in checkpoint order (the order of a daemon's manifest of the same
// files), and the source of their bytes: pass src.Copy to ShmFill. The
// config is used as given (set Model and CheckpointDigest as `wcache serve
// --model` would to make `wcache attach --model` find the weights). The
// publication carries each file's content digest and identity (Files), as
// a daemon that loaded the files records them: the digest comes from the
// per-user digest cache (DefaultDigestCache) by identity, in any
// algorithm (a SHA256Tree digest cached by an older client is as good a
// record: whoever checks it computes that algorithm), or else this
// reads the file once more (from the page cache, typically) before the
// publish and caches the result. Errors: a file that cannot be opened or
// hashed, or that is no longer the file whose header was read (the files
// opened so far are closed).
func OpenCheckpointPublication(ctx context.Context, ck *safetensors.Checkpoint, cfg cacheconfig.Config) (Publication, *CheckpointSource, error) {
	pub := Publication{Config: cfg}
	src := &CheckpointSource{}
	cache, _ := DefaultDigestCache() // none without a home: hash every file
	for _, f := range ck.Files {
		fh, err := f.OpenUnchanged()
		if err != nil {
			_ = src.Close()
			return Publication{}, nil, fmt.Errorf("checkpoint: %w", err)
		}
		src.files = append(src.files, fh)
		digest, cached := cache.LookupAny(f.Stamp)
		if !cached {
			digest, err = filedigest.Complete(ctx, f.Path, f.Stamp.Size, nil, filedigest.Options{})
		}
		if err == nil {
			err = f.Changed()
		}
		if err == nil && !cached {
			// A cache that cannot be written is not fatal: the next
			// publish hashes again.
			_ = cache.Store(f.Stamp, digest)
		}
		if err != nil {
			_ = src.Close()
			return Publication{}, nil, fmt.Errorf("checkpoint: %w", err)
		}
		pub.Files = append(pub.Files, cacheconfig.FileContent{Name: filepath.Base(f.Path), Path: f.Path, Digest: digest, Identity: f.Stamp})
		for _, t := range f.Header.Tensors {
			pub.Tensors = append(pub.Tensors, TensorSpec{Name: t.Name, DType: string(t.DType), Shape: t.Shape, Length: t.Len()})
			src.srcs = append(src.srcs, tensorSource{f: fh, path: f.Path, offset: f.Offset(t), length: int64(t.Len())})
		}
	}
	slices.SortFunc(pub.Files, func(a, b cacheconfig.FileContent) int { return strings.Compare(a.Name, b.Name) })
	return pub, src, nil
}

// Copy reads table entry i's bytes from its file into dst (a CopyFunc).
// dst must be exactly the tensor's length.
func (s *CheckpointSource) Copy(i int, dst []byte) error {
	if i < 0 || i >= len(s.srcs) {
		return fmt.Errorf("checkpoint has no table entry %d", i)
	}
	t := s.srcs[i]
	if int64(len(dst)) != t.length {
		return fmt.Errorf("%s: %d bytes to fill, the tensor has %d", t.f.Name(), len(dst), t.length)
	}
	if _, err := t.f.ReadAt(dst, t.offset); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", t.f.Name(), err)
	}
	return nil
}

// Ranges returns every table entry's file range, in table order (for
// BackendFill, which has the backend read the files itself).
func (s *CheckpointSource) Ranges() []FileRange {
	out := make([]FileRange, len(s.srcs))
	for i, t := range s.srcs {
		out[i] = FileRange{Path: t.path, Offset: uint64(t.offset), Length: uint64(t.length)}
	}
	return out
}

// Close closes the checkpoint's files.
func (s *CheckpointSource) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	s.files = nil
	return errors.Join(errs...)
}
