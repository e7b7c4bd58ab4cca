package filedigest

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

// Options tune File and Complete. The zero value selects every default.
type Options struct {
	// Algorithm is the digest's algorithm (default Default). The leaves
	// given to Complete must be of it.
	Algorithm Algorithm
	// Workers is the number of goroutines that read and hash leaves
	// (default min(8, runtime.NumCPU())).
	Workers int
	// Progress (may be nil) is called with the bytes hashed so far and
	// the bytes to hash, from the worker goroutines (serialised).
	Progress func(done, total int64)
}

// File returns the content digest (in opts.Algorithm) of the regular file at path, reading it
// once with opts.Workers goroutines. The size is the one fstat gave when
// the file was opened; a file that shrinks meanwhile is an error.
func File(ctx context.Context, path string, opts Options) (string, error) {
	return Complete(ctx, path, -1, nil, opts)
}

// Complete returns the content digest of the file at path of size bytes
// (-1: its current size) given the leaves already hashed (by a fill, say):
// it reads and hashes only the leaves missing from have. Leaves beyond the
// file are an error, as is a file whose size is not size.
func Complete(ctx context.Context, path string, size int64, have []Leaf, opts Options) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("content digest: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("content digest: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("content digest: %s is not a regular file", path)
	}
	if size < 0 {
		size = st.Size()
	}
	if st.Size() != size {
		return "", fmt.Errorf("content digest of %s: %d bytes, %d expected (changed meanwhile)", path, st.Size(), size)
	}
	alg := opts.Algorithm
	if alg == "" {
		alg = Default
	}
	n := LeafCount(size)
	leaves := make([]Sum, n)
	known := make([]bool, n)
	for _, l := range have {
		if l.Index < 0 || l.Index >= n {
			return "", fmt.Errorf("content digest of %s: leaf %d of %d", path, l.Index, n)
		}
		leaves[l.Index], known[l.Index] = l.Sum, true
	}
	var missing []int64
	var total int64
	for i := range n {
		if !known[i] {
			missing = append(missing, i)
			_, ln := LeafRange(size, i)
			total += ln
		}
	}
	if err := hashLeaves(ctx, f, path, size, missing, leaves, total, alg, opts); err != nil {
		return "", err
	}
	return alg.Root(size, leaves)
}

// hashLeaves reads and hashes the leaves listed in missing into leaves.
func hashLeaves(ctx context.Context, f *os.File, path string, size int64, missing []int64, leaves []Sum, total int64, alg Algorithm, opts Options) error {
	workers := opts.Workers
	if workers <= 0 {
		workers = min(8, runtime.NumCPU())
	}
	workers = min(workers, len(missing))
	var (
		next     atomic.Int64
		done     int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			buf := make([]byte, LeafBytes)
			for {
				k := next.Add(1) - 1
				if k >= int64(len(missing)) || ctx.Err() != nil {
					return
				}
				i := missing[k]
				off, ln := LeafRange(size, i)
				if _, err := f.ReadAt(buf[:ln], off); err != nil {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("content digest: read %s at %d: %w", path, off, err)
					}
					mu.Unlock()
					return
				}
				leaves[i] = alg.Leaf(buf[:ln])
				if opts.Progress != nil {
					mu.Lock()
					done += ln
					opts.Progress(done, total)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("content digest of %s: %w", path, err)
	}
	return nil
}
