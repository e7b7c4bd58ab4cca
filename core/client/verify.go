package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
)

// ErrVerify is matched by every error of Verify that says the daemon's
// tensors are not the checkpoint's (a missing, extra or different tensor),
// as opposed to failing to read or import them.
var ErrVerify = errors.New("daemon tensors differ from the checkpoint")

// Importer reads device memory this process cannot map: a backend that
// imports a handle and digests byte ranges of it. sdk.Backend implements it
// (a started plugin's Backend(), for the GPU the daemon serves as this
// process sees it).
type Importer interface {
	Import(ctx context.Context, gpu int, h sdk.Handle) (sdk.AllocationID, error)
	Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error)
	Free(ctx context.Context, id sdk.AllocationID) error
}

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Importer, when set, verifies handles this process cannot map
	// (cuda-ipc) through the backend: import, SHA-256 of each tensor on the
	// device, free. nil: such a handle is a *NotMappableError.
	Importer Importer
	// GPU is the ordinal the Importer imports into.
	GPU int
	// Progress, when set, is called with the bytes compared so far and the
	// manifest's total (Manifest.Bytes), from the calling goroutine: every
	// 1 MiB compared (posix-shm), after each tensor's file digest (other
	// kinds). nil: no calls.
	Progress func(done, total uint64)
}

// VerifyResult is what Verify compared.
type VerifyResult struct {
	Tensors int
	Bytes   uint64
}

// maxDigestRanges bounds the ranges of one Digest call so that a request
// stays small whatever the tensor count.
const maxDigestRanges = 1024

// Verify checks that m holds exactly ck's tensors, with the same dtype,
// shape and bytes. posix-shm and memfd handles are mapped read-only, as an engine maps
// them, and compared byte for byte with the files; other kinds go through
// opts.Importer (a *NotMappableError without one). The first difference is
// an error naming the tensor that matches ErrVerify; a failure to read,
// map or import is returned wrapped as it came.
func Verify(ctx context.Context, m *Manifest, ck *safetensors.Checkpoint, opts VerifyOptions) (VerifyResult, error) {
	srcs, err := checkTensors(m, ck)
	if err != nil {
		return VerifyResult{}, err
	}
	byHandle := make([][]int, len(m.Handles))
	for i, t := range m.Tensors {
		byHandle[t.Handle] = append(byHandle[t.Handle], i)
	}
	files := newFileReader()
	defer files.close()
	files.progress = newVerifyProgress(opts.Progress, m.Bytes())
	for hi, h := range m.Handles {
		if err := ctx.Err(); err != nil {
			return VerifyResult{}, fmt.Errorf("verify: %w", err)
		}
		switch {
		case mappable(h.Kind):
			err = verifyMapped(m, hi, byHandle[hi], srcs, files)
		case opts.Importer != nil:
			err = verifyImported(ctx, opts, m, hi, byHandle[hi], srcs, files)
		default:
			err = fmt.Errorf("verify: %w", &NotMappableError{Handle: hi, Kind: h.Kind})
		}
		if err != nil {
			return VerifyResult{}, err
		}
	}
	return VerifyResult{Tensors: len(m.Tensors), Bytes: m.Bytes()}, nil
}

// source is where a tensor lives in the checkpoint.
type source struct {
	f *safetensors.File
	t safetensors.TensorInfo
}

// checkTensors matches m's tensors with ck's by name, dtype, shape and
// length, and returns each manifest tensor's source.
func checkTensors(m *Manifest, ck *safetensors.Checkpoint) ([]source, error) {
	byName := make(map[string]source, ck.NumTensors())
	for _, f := range ck.Files {
		for _, t := range f.Header.Tensors {
			byName[t.Name] = source{f, t}
		}
	}
	if len(m.Tensors) != len(byName) {
		return nil, fmt.Errorf("verify: the daemon holds %d tensors, the checkpoint has %d: %w",
			len(m.Tensors), len(byName), ErrVerify)
	}
	srcs := make([]source, len(m.Tensors))
	for i, t := range m.Tensors {
		src, ok := byName[t.Name]
		if !ok {
			return nil, fmt.Errorf("verify: tensor %q is not in the checkpoint: %w", t.Name, ErrVerify)
		}
		if t.Length != src.t.Len() || t.DType != string(src.t.DType) || !slices.Equal(t.Shape, src.t.Shape) {
			return nil, fmt.Errorf("verify: tensor %q is %s %v (%d bytes) in the daemon, %s %v (%d bytes) in %s: %w",
				t.Name, t.DType, t.Shape, t.Length, src.t.DType, src.t.Shape, src.t.Len(), src.f.Path, ErrVerify)
		}
		delete(byName, t.Name) // a repeated name then finds nothing
		srcs[i] = src
	}
	return srcs, nil
}

// verifyMapped maps handle hi and compares the bytes of its tensors idx
// with the files.
func verifyMapped(m *Manifest, hi int, idx []int, srcs []source, files *fileReader) error {
	data, err := MapHandle(hi, m.Handles[hi])
	if err != nil {
		return fmt.Errorf("verify: handle %d: %w", hi, err)
	}
	defer Unmap(data)
	for _, ti := range idx {
		t := m.Tensors[ti]
		if err := files.compare(srcs[ti], data[t.Offset:t.Offset+t.Length]); err != nil {
			return fmt.Errorf("verify: tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// verifyImported imports handle hi through the Importer and compares the
// device SHA-256 of its tensors idx, in batches, with the files'.
func verifyImported(ctx context.Context, opts VerifyOptions, m *Manifest, hi int, idx []int, srcs []source,
	files *fileReader) (err error) {
	h := m.Handles[hi]
	// A descriptor handle goes with its descriptor (the lease's; the Importer
	// borrows it for the call).
	id, err := opts.Importer.Import(ctx, opts.GPU, sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size, File: h.File})
	if err != nil {
		return fmt.Errorf("verify: import handle %d (%s): %w", hi, h.Kind, err)
	}
	defer func() {
		if ferr := opts.Importer.Free(ctx, id); ferr != nil && err == nil {
			err = fmt.Errorf("verify: release imported handle %d: %w", hi, ferr)
		}
	}()
	for start := 0; start < len(idx); start += maxDigestRanges {
		batch := idx[start:min(start+maxDigestRanges, len(idx))]
		ranges := make([]sdk.Range, len(batch))
		for i, ti := range batch {
			ranges[i] = sdk.Range{Offset: m.Tensors[ti].Offset, Length: m.Tensors[ti].Length}
		}
		got, err := opts.Importer.Digest(ctx, id, ranges)
		if err != nil {
			return fmt.Errorf("verify: digest: %w", err)
		}
		if len(got) != len(batch) {
			return fmt.Errorf("verify: the backend returned %d digests for %d ranges", len(got), len(batch))
		}
		for i, ti := range batch {
			want, err := files.sha256(srcs[ti])
			if err != nil {
				return err
			}
			if got[i] != want {
				return fmt.Errorf("verify: tensor %q differs from the file: device sha256 %x, file sha256 %x: %w",
					m.Tensors[ti].Name, got[i], want, ErrVerify)
			}
		}
	}
	return nil
}

// fileReader reads tensors from checkpoint files, each opened once, and
// counts the bytes it compared.
type fileReader struct {
	open     map[string]*os.File
	buf      []byte
	progress *verifyProgress
}

// verifyProgress counts compared bytes for VerifyOptions.Progress; a nil
// *verifyProgress counts nothing.
type verifyProgress struct {
	report      func(done, total uint64)
	done, total uint64
}

func newVerifyProgress(report func(done, total uint64), total uint64) *verifyProgress {
	if report == nil {
		return nil
	}
	return &verifyProgress{report: report, total: total}
}

func (p *verifyProgress) add(n uint64) {
	if p == nil {
		return
	}
	p.done += n
	p.report(p.done, p.total)
}

func newFileReader() *fileReader {
	return &fileReader{open: map[string]*os.File{}, buf: make([]byte, 1<<20)}
}

func (r *fileReader) file(path string) (*os.File, error) {
	if f, ok := r.open[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	r.open[path] = f
	return f, nil
}

// section is the tensor's bytes in its file.
func (r *fileReader) section(src source) (*io.SectionReader, error) {
	f, err := r.file(src.f.Path)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(f, src.f.Offset(src.t), int64(src.t.Len())), nil
}

// compare reads the tensor's bytes from its file in chunks and compares
// them with got.
func (r *fileReader) compare(src source, got []byte) error {
	sec, err := r.section(src)
	if err != nil {
		return err
	}
	for off := 0; off < len(got); {
		n, err := io.ReadFull(sec, r.buf[:min(len(r.buf), len(got)-off)])
		if err != nil {
			return fmt.Errorf("read %s: %w", src.f.Path, err)
		}
		if !bytes.Equal(got[off:off+n], r.buf[:n]) {
			return fmt.Errorf("bytes in the daemon differ from %s at tensor offset %d: %w",
				src.f.Path, off+firstDiff(got[off:off+n], r.buf[:n]), ErrVerify)
		}
		off += n
		r.progress.add(uint64(n))
	}
	return nil
}

// sha256 hashes the tensor's bytes in its file.
func (r *fileReader) sha256(src source) ([32]byte, error) {
	sec, err := r.section(src)
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, sec, r.buf); err != nil {
		return [32]byte{}, fmt.Errorf("verify: read %s: %w", src.f.Path, err)
	}
	r.progress.add(src.t.Len())
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

func (r *fileReader) close() {
	for _, f := range r.open {
		f.Close()
	}
}

// firstDiff is the index of the first differing byte of two slices of equal
// length that differ.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}
