package fill

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// memcpyCopier copies synchronously into a prefaulted destination: the
// pipeline's own cost on top of reading from the page cache.
type memcpyCopier struct{ dst []byte }

func (c memcpyCopier) Acquire(_ context.Context, buffers, size int) (Lane, error) {
	l := &memcpyLane{dst: c.dst}
	for range buffers {
		l.bufs = append(l.bufs, make([]byte, size))
	}
	return l, nil
}

type memcpyLane struct {
	dst  []byte
	bufs [][]byte
}

func (l *memcpyLane) Buffer(i int) []byte { return l.bufs[i] }
func (l *memcpyLane) CopyAsync(i, off, n int, dst uint64) (Completion, error) {
	copy(l.dst[dst:], l.bufs[i][off:off+n])
	return Done(nil), nil
}
func (l *memcpyLane) Release(error) {}

// BenchmarkFillFromPageCache fills 256 MiB from a file in the page cache
// into prefaulted memory with 1, 2 and 4 readers and 1 MiB buffers.
func BenchmarkFillFromPageCache(b *testing.B) {
	const size = 256 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{3}).Read(data)
	path := filepath.Join(b.TempDir(), "ckpt")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, size)
	for i := range dst {
		dst[i] = 1
	}
	for _, readers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				_, err := Fill(context.Background(), memcpyCopier{dst: dst}, size, []sdk.Extent{{Path: path, Length: size}}, nil,
					Options{Readers: readers, Buffers: 1, BufferBytes: 1 << 20, Direct: DirectNever})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFillDigest fills WCACHE_BENCH_FILL_MIB (default 256) MiB from
// the page cache into prefaulted memory with and without the content
// digest (Options.NoDigest), 16 MiB buffers, two per reader: the ratio of
// the two rates is the cost of hashing during a fill (docs/benchmarks.md).
func BenchmarkFillDigest(b *testing.B) {
	size := 256 << 20
	if v, err := strconv.Atoi(os.Getenv("WCACHE_BENCH_FILL_MIB")); err == nil && v > 0 {
		size = v << 20
	}
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{4}).Read(data)
	path := filepath.Join(b.TempDir(), "ckpt")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	data = nil
	dst := make([]byte, size)
	for i := range dst {
		dst[i] = 1
	}
	for _, readers := range []int{1, 2, 4, 8} {
		for _, noDigest := range []bool{true, false} {
			b.Run(fmt.Sprintf("readers=%d/digest=%v", readers, !noDigest), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					_, err := Fill(context.Background(), memcpyCopier{dst: dst}, uint64(size), []sdk.Extent{{Path: path, Length: uint64(size)}}, nil,
						Options{Readers: readers, Buffers: 2, BufferBytes: DefaultBufferBytes, Direct: DirectNever, NoDigest: noDigest})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
