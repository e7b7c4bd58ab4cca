package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// testConcurrency runs Options.Concurrency goroutines that each allocate,
// load their own file, digest, read back and free, while Devices is
// called alongside. A race detector run of this subtest is the best check
// of a backend's locking.
func (s *suite) testConcurrency(t *testing.T) {
	b := s.newBackend(t)
	ctx := s.ctx(t)
	n := s.opts.Concurrency
	files := make([]file, n)
	for i := range files {
		files[i] = writeFile(t, fmt.Sprintf("c%d.safetensors", i), 200_000+i*4097, uint64(100+i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- s.cycle(ctx, b, files[i], uint64(i*7+1))
		}()
		go func() {
			defer wg.Done()
			if _, err := b.Devices(ctx); err != nil {
				errs <- fmt.Errorf("backend.Devices: %w", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	s.assertUsable(t, b)
}

// cycle is one goroutine's allocate, load, digest, read, free.
func (s *suite) cycle(ctx context.Context, b sdk.Backend, f file, dest uint64) error {
	length := uint64(len(f.data))
	id, _, err := b.Allocate(ctx, s.opts.Ordinal, dest+length)
	if err != nil {
		return fmt.Errorf("backend.Allocate: %w", err)
	}
	freed := false
	defer func() {
		if !freed {
			_ = b.Free(context.Background(), id)
		}
	}()
	if err := b.Load(ctx, id, []sdk.Extent{{Path: f.path, Length: length, DestOffset: dest}}, nil); err != nil {
		return fmt.Errorf("backend.Load %s: %w", f.path, err)
	}
	sums, err := b.Digest(ctx, id, []sdk.Range{{Offset: dest, Length: length}})
	if err != nil {
		return fmt.Errorf("backend.Digest: %w", err)
	}
	if len(sums) != 1 || sums[0] != sum(f.data) {
		return fmt.Errorf("allocation %d: digest of %s differs from the file's sha256", id, f.path)
	}
	head, err := b.Read(ctx, id, dest, 1024)
	if err != nil {
		return fmt.Errorf("backend.Read: %w", err)
	}
	if !bytes.Equal(head, f.data[:1024]) {
		return fmt.Errorf("allocation %d: bytes read back differ from %s", id, f.path)
	}
	freed = true
	if err := b.Free(ctx, id); err != nil {
		return fmt.Errorf("backend.Free: %w", err)
	}
	return nil
}
