package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/sdk"
)

// Loader is what BackendFill needs of a backend: the Importer's calls and
// Load. sdk.Backend satisfies it.
type Loader interface {
	Importer
	Load(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error
}

// FileRange is where one table entry's bytes are: Length bytes at Offset
// of the file Path.
type FileRange struct {
	Path           string
	Offset, Length uint64
}

// BackendFill returns a FillFunc for handles this process cannot map (a
// GPU backend's cuda-ipc, hip-ipc): each handle is imported once through
// the backend on ordinal gpu (in the backend's plugin process, which opens
// the daemon's allocation like any engine would), each entry's file range
// is loaded to its place with the backend's Load, and with digest the
// SHA-256s are taken on the device afterwards with the backend's Digest.
// The imports are freed before it returns. srcs is in table order.
func BackendFill(backend Loader, gpu int, srcs []FileRange, digest bool) FillFunc {
	return func(ctx context.Context, plan *PublishPlan) ([][]byte, error) {
		if len(srcs) != len(plan.Tensors) {
			return nil, fmt.Errorf("%d sources for %d table entries", len(srcs), len(plan.Tensors))
		}
		ids := make([]sdk.AllocationID, len(plan.Handles))
		sums, err := backendFill(ctx, backend, gpu, srcs, digest, plan, ids)
		errs := []error{err}
		for i, id := range ids {
			if id != 0 {
				if err := backend.Free(context.Background(), id); err != nil {
					errs = append(errs, fmt.Errorf("free import of handle %d: %w", i, err))
				}
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return sums, nil
	}
}

// backendFill imports (recording the ids for the caller to free), loads
// and digests.
func backendFill(ctx context.Context, backend Loader, gpu int, srcs []FileRange, digest bool, plan *PublishPlan, ids []sdk.AllocationID) ([][]byte, error) {
	for i, h := range plan.Handles {
		id, err := backend.Import(ctx, gpu, sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size})
		if err != nil {
			return nil, fmt.Errorf("import writable handle %d (%s): %w", i, h.Kind, err)
		}
		ids[i] = id
	}
	extents := make([][]sdk.Extent, len(plan.Handles))
	for i, t := range plan.Tensors {
		if t.Handle < 0 || t.Handle >= len(ids) || srcs[i].Length != t.Length {
			return nil, fmt.Errorf("table entry %d (%s): handle %d, %d bytes to fill, the source has %d", i, t.Name, t.Handle, t.Length, srcs[i].Length)
		}
		if t.Length > 0 {
			extents[t.Handle] = append(extents[t.Handle], sdk.Extent{Path: srcs[i].Path, FileOffset: srcs[i].Offset, Length: t.Length, DestOffset: t.Offset})
		}
	}
	for i, e := range extents {
		if len(e) == 0 {
			continue
		}
		if err := backend.Load(ctx, ids[i], e, nil); err != nil {
			return nil, fmt.Errorf("load handle %d: %w", i, err)
		}
	}
	if !digest {
		return nil, nil
	}
	sums := make([][]byte, len(plan.Tensors))
	for i, t := range plan.Tensors {
		d, err := backend.Digest(ctx, ids[t.Handle], []sdk.Range{{Offset: t.Offset, Length: t.Length}})
		if err != nil {
			return nil, fmt.Errorf("digest table entry %d (%s): %w", i, t.Name, err)
		}
		sums[i] = d[0][:]
	}
	return sums, nil
}
