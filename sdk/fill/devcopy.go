package fill

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/wcache/wcache/sdk"
)

// Defaults of CopyOptions.
const (
	// DefaultCopyStreams is how many streams a device copy runs side by
	// side: enough to keep a copy engine busy while another stream's
	// completion is being waited for.
	DefaultCopyStreams = 4
	// DefaultCopyChunk is the bytes of one queued device-to-device copy.
	DefaultCopyChunk = 64 << 20
	// DefaultCopyDepth is how many copies one stream keeps queued.
	DefaultCopyDepth = 2
)

// DeviceCopier is what a backend supplies to CopyDevice: streams copying
// from one source (a peer's memory the backend imported) to one
// destination (a new allocation). CUDA: a stream and events,
// cuMemcpyPeerAsync (or a DtoD copy with peer access enabled), staged
// through pinned host memory when the devices have no P2P path; ROCm:
// hipMemcpyPeerAsync; the mock: a memcpy.
type DeviceCopier interface {
	// AcquireStream returns a stream. CopyDevice calls it from a goroutine
	// locked to its OS thread and makes every call on the stream, Release
	// included, from that goroutine. It must return ctx's error when ctx
	// ends first.
	AcquireStream(ctx context.Context) (Stream, error)
}

// Stream is one copy queue.
type Stream interface {
	// CopyAsync queues a copy of n bytes at offset off of the source to
	// offset off of the destination and returns its Completion; a
	// synchronous copier copies here and returns Done(err).
	CopyAsync(off, n uint64) (Completion, error)
	// Release gives the stream back once every Completion of it has been
	// waited for; failed is the first error the stream saw (nil: none).
	Release(failed error)
}

// CopyOptions tune CopyDevice. The zero value selects every default.
type CopyOptions struct {
	// Streams is the number of streams (default DefaultCopyStreams); a
	// copy of fewer chunks runs fewer.
	Streams int
	// ChunkBytes is the size of each queued copy (default
	// DefaultCopyChunk).
	ChunkBytes uint64
	// Depth is the number of copies one stream keeps queued (default
	// DefaultCopyDepth).
	Depth int
}

func (o CopyOptions) withDefaults() (CopyOptions, error) {
	if o.Streams == 0 {
		o.Streams = DefaultCopyStreams
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = DefaultCopyChunk
	}
	if o.Depth == 0 {
		o.Depth = DefaultCopyDepth
	}
	if o.Streams < 0 || o.Depth < 0 {
		return o, fmt.Errorf("device copy: %d streams of depth %d", o.Streams, o.Depth)
	}
	return o, nil
}

// CopyDevice copies [0, length) from the copier's source to its
// destination: the range is cut into ChunkBytes chunks, Streams goroutines
// take chunks in order from one counter, and each keeps up to Depth copies
// queued on its stream, waiting for the oldest before it queues another.
//
// The first error (a copy, a wait, AcquireStream, ctx's end) stops every
// stream; CopyDevice returns only after every queued copy has completed,
// so the caller may free the destination as soon as it returns. Progress
// (nil: none) is called from the calling goroutine with the bytes whose
// copies completed. The stats count what completed.
func CopyDevice(ctx context.Context, c DeviceCopier, length uint64, opts CopyOptions, progress sdk.ProgressFunc) (sdk.PeerCopyStats, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return sdk.PeerCopyStats{}, err
	}
	if length == 0 {
		return sdk.PeerCopyStats{}, nil
	}
	chunks := (length + opts.ChunkBytes - 1) / opts.ChunkBytes
	streams := int(min(uint64(opts.Streams), chunks))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	start := time.Now()
	var (
		mu   sync.Mutex
		next uint64 // the next chunk to queue
	)
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == chunks || ctx.Err() != nil {
			return 0, false
		}
		next++
		return next - 1, true
	}
	done := make(chan uint64, streams*opts.Depth)
	var wg sync.WaitGroup
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runStream(ctx, c, take, opts, length, done); err != nil {
				cancel(err) // the first failure is the cause; the others saw it cancel them
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()

	st := sdk.PeerCopyStats{Streams: streams}
	for n := range done {
		st.Bytes += n
		st.Chunks++
		if progress != nil {
			progress(st.Bytes, length)
		}
	}
	st.Wall = time.Since(start)
	// The cause, not the first error sent: a stream stopped by another's
	// failure reports the cancellation, and may report it first.
	if err := context.Cause(ctx); err != nil {
		return st, fmt.Errorf("device copy of %d bytes: %w", length, err)
	}
	return st, nil
}

// runStream is one stream's loop: acquire, queue chunks up to Depth,
// waiting for the oldest first, then wait for the rest and release.
func runStream(ctx context.Context, c DeviceCopier, take func() (uint64, bool), opts CopyOptions, length uint64, done chan<- uint64) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := c.AcquireStream(ctx)
	if err != nil {
		return fmt.Errorf("acquire a copy stream: %w", err)
	}
	type queued struct {
		c Completion
		n uint64
	}
	var ring []queued
	wait := func(q queued) error {
		if werr := q.c.Wait(); werr != nil {
			return werr
		}
		done <- q.n
		return nil
	}
	defer func() {
		for _, q := range ring { // every queued copy completes before Release
			if werr := wait(q); werr != nil && err == nil {
				err = werr
			}
		}
		s.Release(err)
	}()
	for {
		i, ok := take()
		if !ok {
			return nil
		}
		if len(ring) == opts.Depth {
			q := ring[0]
			ring = ring[1:]
			if err := wait(q); err != nil {
				return err
			}
		}
		off := i * opts.ChunkBytes
		n := min(opts.ChunkBytes, length-off)
		comp, err := s.CopyAsync(off, n)
		if err != nil {
			return fmt.Errorf("queue copy [%d, +%d): %w", off, n, err)
		}
		ring = append(ring, queued{comp, n})
	}
}
