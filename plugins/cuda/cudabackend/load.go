package cudabackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/staging"
	"github.com/wcache/wcache/sdk"
)

// progressStep is the least number of bytes between progress calls.
const progressStep = 4 << 20

// Load copies every extent from its file into the allocation through the
// device's pinned staging buffers: the calling goroutine reads chunk k
// (pread, O_DIRECT where possible) into buffer k mod N while the GPU copies
// chunk k-1 out of the previous buffer (cuMemcpyHtoDAsync_v2 on the
// worker's stream); a buffer is refilled only after the event recorded
// after its last copy has completed. Load returns after the stream has
// drained, so the bytes are in place for Read, Digest and Export.
//
// Adjacent extents (same file, contiguous in the file and in the
// allocation) are merged. An extent outside the allocation or past its
// file's end, or a file that cannot be opened, is ErrInvalidArgument and
// nothing is copied. One Load at a time uses a device's staging buffers;
// concurrent Loads on one device queue.
func (b *Backend) Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
	m, err := b.hold(id)
	if err != nil {
		return err
	}
	defer b.release(m)
	extents, total, err := checkExtents(extents, m.size)
	if err != nil {
		return fmt.Errorf("load into allocation %d: %w", id, err)
	}
	if len(extents) == 0 {
		return nil
	}
	files, err := b.openFiles(extents)
	if err != nil {
		return fmt.Errorf("load into allocation %d: %w", id, err)
	}
	defer closeFiles(files)
	w, err := b.rt.worker(m.ordinal)
	if err != nil {
		return err
	}
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	if err := b.ensureStager(ctx, w); err != nil {
		return fmt.Errorf("load into allocation %d: staging buffers: %w", id, err)
	}
	p := &pipeline{b: b, w: w, m: m, total: total, progress: progress}
	loadErr := p.run(ctx, extents, files)
	// Whatever happened, no copy may still read a staging buffer when the
	// next Load refills it, and the data must be complete before Load
	// returns: drain the stream.
	syncErr := w.do(context.Background(), func() error { return b.rt.drv.StreamSynchronize(w.stream) })
	if loadErr != nil {
		return fmt.Errorf("load into allocation %d: %w", id, errors.Join(loadErr, syncErr))
	}
	if syncErr != nil {
		return fmt.Errorf("load into allocation %d: wait for copies: %w", id, syncErr)
	}
	if progress != nil && p.reported != total {
		progress(total, total)
	}
	return nil
}

// checkExtents validates extents against an allocation of size bytes,
// drops empty ones, merges adjacent ones and returns the byte total.
func checkExtents(in []sdk.Extent, size uint64) ([]sdk.Extent, uint64, error) {
	var out []sdk.Extent
	var total uint64
	for i, e := range in {
		if e.Length == 0 {
			continue
		}
		if e.DestOffset > size || e.Length > size-e.DestOffset {
			return nil, 0, sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: [%d, +%d) lies outside the %d-byte allocation", i, e.DestOffset, e.Length, size)
		}
		if e.FileOffset > math.MaxInt64 || e.Length > math.MaxInt64-e.FileOffset {
			return nil, 0, sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: file range [%d, +%d) overflows", i, e.FileOffset, e.Length)
		}
		total += e.Length
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.Path == e.Path && last.FileOffset+last.Length == e.FileOffset && last.DestOffset+last.Length == e.DestOffset {
				last.Length += e.Length
				continue
			}
		}
		out = append(out, e)
	}
	return out, total, nil
}

// openFiles opens each distinct path once and checks every extent fits
// its file.
func (b *Backend) openFiles(extents []sdk.Extent) (map[string]*staging.File, error) {
	files := map[string]*staging.File{}
	for i, e := range extents {
		f, ok := files[e.Path]
		if !ok {
			var err error
			f, err = staging.Open(e.Path, b.rt.cfg.DirectIO)
			if err != nil {
				closeFiles(files)
				return nil, sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: %v", i, err)
			}
			files[e.Path] = f
		}
		if e.FileOffset+e.Length > uint64(f.Size()) {
			closeFiles(files)
			return nil, sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: [%d, +%d) runs past the end of %s (%d bytes)", i, e.FileOffset, e.Length, e.Path, f.Size())
		}
	}
	return files, nil
}

func closeFiles(files map[string]*staging.File) {
	for _, f := range files {
		f.Close()
	}
}

// ensureStager allocates the device's staging buffers on first use.
func (b *Backend) ensureStager(ctx context.Context, w *worker) error {
	return w.do(ctx, func() error {
		if w.stage != nil {
			return nil
		}
		s, err := newStager(b.rt.drv, b.rt.cfg.StagingBuffers, b.rt.cfg.StagingBytes)
		if err != nil {
			return err
		}
		w.stage = s
		return nil
	})
}

// pipeline is one Load's progress through the staging ring.
type pipeline struct {
	b        *Backend
	w        *worker
	m        *deviceMemory
	total    uint64
	done     uint64
	reported uint64
	progress sdk.ProgressFunc
	next     int // staging buffer for the next chunk
}

func (p *pipeline) run(ctx context.Context, extents []sdk.Extent, files map[string]*staging.File) error {
	drv := p.b.rt.drv
	st := p.w.stage
	bufSize := p.b.rt.cfg.StagingBytes
	for i, e := range extents {
		f := files[e.Path]
		for _, c := range staging.Plan(e.FileOffset, e.Length, e.DestOffset, bufSize, f.Alignment()) {
			if err := ctx.Err(); err != nil {
				return err
			}
			select {
			case <-p.b.rt.closing:
				return errClosed
			default:
			}
			k := p.next
			p.next = (p.next + 1) % len(st.bufs)
			buf, ev := st.bufs[k], st.events[k]
			// Wait until the GPU has finished the last copy out of buffer k.
			if err := p.w.do(ctx, func() error { return drv.EventSynchronize(ev) }); err != nil {
				return fmt.Errorf("wait for staging buffer %d: %w", k, err)
			}
			if err := f.ReadChunk(buf.Bytes(), c); err != nil {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					return sdk.Errorf(sdk.ErrInvalidArgument, "extent %d: %v", i, err)
				}
				return fmt.Errorf("extent %d: %w", i, err)
			}
			dst := p.m.ptr + driver.DevicePtr(c.Dest)
			err := p.w.do(ctx, func() error {
				if err := drv.MemcpyHtoDAsync(dst, buf, c.Skip, c.Len, p.w.stream); err != nil {
					return err
				}
				return drv.EventRecord(ev, p.w.stream)
			})
			if err != nil {
				return fmt.Errorf("extent %d: copy %d bytes to device offset %d: %w", i, c.Len, c.Dest, err)
			}
			p.done += uint64(c.Len)
			if p.progress != nil && (p.done-p.reported >= progressStep || p.done == p.total) {
				p.reported = p.done
				p.progress(p.done, p.total)
			}
		}
	}
	return nil
}
