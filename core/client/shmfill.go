package client

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/sdk/names"
)

// CopyFunc writes table entry i's bytes into dst, which is exactly the
// entry's Length bytes of mapped, writable daemon memory.
type CopyFunc func(i int, dst []byte) error

// ShmFill is a FillFunc for posix-shm handles: it maps every handle
// writable (open O_RDWR, mmap PROT_READ|PROT_WRITE, MAP_SHARED), calls copy
// once per distinct range (tensors of one storage share theirs), unmaps,
// and with digest returns the SHA-256 of every entry's range. Another
// handle kind (device memory) is an error: fill it with a FillFunc of the
// device's own API.
func ShmFill(copy CopyFunc, digest bool) FillFunc {
	return func(ctx context.Context, plan *PublishPlan) ([][]byte, error) {
		maps := make([][]byte, len(plan.Handles))
		defer func() {
			for _, m := range maps {
				if m != nil {
					_ = mmap.Unmap(m)
				}
			}
		}()
		for i, h := range plan.Handles {
			var m []byte
			var err error
			switch {
			case h.Kind == names.KindPosixShm:
				m, err = mapWritable(string(h.Data), h.Size)
			case h.Kind == names.KindMemfd && h.File != nil:
				m, err = mapWritableFile(h.File, h.Size)
			default:
				return nil, fmt.Errorf("handle %d is %q: ShmFill maps %s and %s handles only", i, h.Kind, names.KindPosixShm, names.KindMemfd)
			}
			if err != nil {
				return nil, fmt.Errorf("handle %d: %w", i, err)
			}
			maps[i] = m
		}
		type rangeKey struct {
			handle         int
			offset, length uint64
		}
		done := map[rangeKey]int{}
		var sums [][]byte
		if digest {
			sums = make([][]byte, len(plan.Tensors))
		}
		for i, t := range plan.Tensors {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			k := rangeKey{t.Handle, t.Offset, t.Length}
			dst := maps[t.Handle][t.Offset : t.Offset+t.Length]
			if j, ok := done[k]; ok {
				if digest {
					sums[i] = sums[j]
				}
				continue
			}
			done[k] = i
			if err := copy(i, dst); err != nil {
				return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if digest {
				s := sha256.Sum256(dst)
				sums[i] = s[:]
			}
		}
		return sums, nil
	}
}

// mapWritable maps a posix-shm file of size bytes for writing.
func mapWritable(path string, size uint64) ([]byte, error) {
	return mmap.Path(path, size, mmap.ReadWrite, mmap.Exact)
}
