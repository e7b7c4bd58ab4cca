package gpucore

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// exportFD returns a descriptor handle of m: a fresh descriptor from the
// FDDriver on every call (the caller owns Handle.File), taken after
// Driver.Synchronize so that every copy into it is complete. Imported
// descriptor memory exports the same way: that is how a restarted plugin
// or a successor daemon serves memory it adopted.
func (b *Backend) exportFD(ctx context.Context, fdd FDDriver, w *Worker, id sdk.AllocationID, m *memory) (sdk.Handle, error) {
	h := sdk.Handle{Kind: fdd.DescriptorKind(), Size: m.size}
	err := w.Do(ctx, func() error {
		if err := b.rt.drv.Synchronize(); err != nil {
			return err
		}
		var err error
		h.File, err = fdd.ExportFD(m.ptr)
		return err
	})
	if err != nil {
		return sdk.Handle{}, fmt.Errorf("export allocation %d: %w", id, err)
	}
	return h, nil
}

// importFD maps a descriptor handle (Handle.File, borrowed for the call)
// on ordinal and returns a new id for it. Every import is its own mapping
// (descriptors carry no identity to share one by), read-only (imports
// cannot write: FDDriver.ImportFD) and adoptable: Read, Digest, Export
// and Free work on it as on the Backend's own allocations, a Load into it
// is ErrInvalidArgument, and the memory stays as long as any holder of a
// descriptor or a mapping keeps it. No descriptor, a zero size, or a
// descriptor the driver cannot map for Size bytes is ErrInvalidArgument.
func (b *Backend) importFD(ctx context.Context, fdd FDDriver, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	kind := fdd.DescriptorKind()
	if h.File == nil {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import a %s handle without its descriptor", kind)
	}
	if len(h.Data) != 0 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: a %s handle carries no data, this one %d bytes", kind, len(h.Data))
	}
	if h.Size == 0 {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "import: handle of 0 bytes")
	}
	w, err := b.rt.Worker(ordinal)
	if err != nil {
		return 0, err
	}
	m := &memory{ordinal: ordinal, size: h.Size, imported: true, fd: true, readOnly: true}
	err = w.Do(ctx, func() error {
		var err error
		m.ptr, err = fdd.ImportFD(ordinal, h.File, h.Size)
		return err
	})
	if err != nil {
		return 0, openError(b.rt.drv, kind, ordinal, err)
	}
	if err := b.rt.register(m); err != nil {
		return 0, errors.Join(err, b.rt.release(context.Background(), m, w))
	}
	id, err := b.ids.Add(m)
	if err != nil {
		b.release(m)
	}
	return id, err
}
