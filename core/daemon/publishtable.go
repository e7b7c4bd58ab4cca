package daemon

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/tensorview"
)

// Bounds of a publish's table and metadata (docs/publish.md, "Limits"),
// checked entry by entry as the messages arrive, before anything is
// allocated: a table that breaks one is INVALID_ARGUMENT, and the daemon
// never holds more of it than the bounds.
const (
	// maxPublishNameLen bounds a tensor name and a layout's storage key.
	maxPublishNameLen = 1024
	// maxPublishRank bounds a tensor's dimensions.
	maxPublishRank = 64
	// maxPublishTableBytes bounds the table's names, storage keys, dtypes,
	// dimensions and strides together (8 bytes a number): 64 MiB, a
	// million tensors with 64-byte names.
	maxPublishTableBytes = 64 << 20
	// maxPublishMetadata bounds the metadata map: entries, and the bytes
	// of its keys and values together.
	maxPublishMetadataEntries = 1024
	maxPublishMetadataBytes   = 256 << 10
)

// tableBudget accumulates the size of a table as its entries arrive.
type tableBudget struct {
	bytes uint64
	n     int
}

// add checks the entries of one message (numbered from b.n) and charges
// them; the first problem is INVALID_ARGUMENT naming the entry.
func (b *tableBudget) add(specs []*daemonv1.TensorSpec) error {
	for _, s := range specs {
		i := b.n
		b.n++
		if err := checkSpec(s); err != nil {
			return status.Errorf(codes.InvalidArgument, "publish: table entry %d: %v", i, err)
		}
		l := s.GetLayout()
		b.bytes += uint64(len(s.GetName()) + len(s.GetDtype()) + len(l.GetStorage()) + 8*(len(s.GetShape())+len(l.GetStrides())) + 16)
		if b.bytes > maxPublishTableBytes {
			return status.Errorf(codes.InvalidArgument, "publish: the table exceeds %d bytes of names, dtypes and shapes at entry %d", maxPublishTableBytes, i)
		}
	}
	return nil
}

// checkSpec checks one table entry: bounded name, dtype of the vocabulary
// (tensorview.CheckDType), bounded rank, and a view inside its bytes (with
// a layout: its storage's Length; without: the entry's Length).
func checkSpec(s *daemonv1.TensorSpec) error {
	name := s.GetName()
	if len(name) > maxPublishNameLen {
		return fmt.Errorf("name of %d bytes (at most %d)", len(name), maxPublishNameLen)
	}
	if len(s.GetShape()) > maxPublishRank {
		return fmt.Errorf("tensor %q has %d dimensions (at most %d)", name, len(s.GetShape()), maxPublishRank)
	}
	if err := tensorview.CheckDType(s.GetDtype()); err != nil {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	v := tensorview.View{DType: s.GetDtype(), Shape: s.GetShape()}
	if l := s.GetLayout(); l != nil {
		if len(l.GetStorage()) > maxPublishNameLen {
			return fmt.Errorf("tensor %q: storage key of %d bytes (at most %d)", name, len(l.GetStorage()), maxPublishNameLen)
		}
		if l.GetStorage() == "" {
			return fmt.Errorf("tensor %q: a layout without a storage key", name)
		}
		v.StorageOffset = l.GetStorageOffset()
		if len(l.GetStrides()) > 0 {
			v.Strides = l.GetStrides() // none: row-major
		}
	}
	if err := v.Check(s.GetLength()); err != nil {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	return nil
}

// checkMetadata bounds a publish's metadata map.
func checkMetadata(md map[string]string) error {
	if len(md) > maxPublishMetadataEntries {
		return status.Errorf(codes.InvalidArgument, "publish: %d metadata entries (at most %d)", len(md), maxPublishMetadataEntries)
	}
	n := 0
	for k, v := range md {
		n += len(k) + len(v)
	}
	if n > maxPublishMetadataBytes {
		return status.Errorf(codes.InvalidArgument, "publish: metadata of %d bytes (at most %d)", n, maxPublishMetadataBytes)
	}
	return nil
}
