package mock_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/wcache/wcache/internal/mmap"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/sdk/mock"
)

// benchPeerMiB sizes BenchmarkPeerCopy's arena (default 256 MiB).
const benchPeerMiB = "WCACHE_BENCH_PEER_MIB"

// BenchmarkPeerCopy compares the mock's same-node peer copy (import the
// sibling's memfd, allocate a new one, CopyDevice on 4 streams, unmap)
// with one memcpy of the same bytes into fresh memory: the ratio
// "same-node peer fill ÷ memcpy" is peer-copy's MB/s over memcpy's.
//
//	WCACHE_BENCH_PEER_MIB=1024 go test -run '^$' -bench PeerCopy ./sdk/mock
func BenchmarkPeerCopy(b *testing.B) {
	size := uint64(256) << 20
	if v := os.Getenv(benchPeerMiB); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			b.Fatalf("%s=%q: %v", benchPeerMiB, v, err)
		}
		size = n << 20
	}
	ctx := context.Background()
	src, err := mock.NewMemory(mock.MemoryOptions{Memfd: true, Memory: 2*size + 1<<20})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*31 + i>>11)
	}
	_, h := backendtest.ExportData(b, src, size, data)

	b.Run("peer-copy", func(b *testing.B) {
		dst, err := mock.NewMemory(mock.MemoryOptions{Memfd: true, Memory: size + 1<<20})
		if err != nil {
			b.Fatal(err)
		}
		defer dst.Close()
		b.SetBytes(int64(size))
		for b.Loop() {
			res, err := dst.PeerCopy(ctx, sdk.PeerCopyRequest{Source: h}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := dst.Free(ctx, res.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memcpy", func(b *testing.B) {
		view, err := sdk.MapMemfdReadOnly(int(h.File.Fd()), size)
		if err != nil {
			b.Fatal(err)
		}
		defer mmap.Unmap(view)
		b.SetBytes(int64(size))
		for b.Loop() {
			// Fresh memory of the same kind as the copy's destination: a
			// new memfd, mapped and written by one memcpy.
			f, err := sdk.NewMemfd("bench-memcpy", size)
			if err != nil {
				b.Fatal(err)
			}
			fresh, err := mmap.FD(int(f.Fd()), size, mmap.ReadWrite)
			if err != nil {
				b.Fatal(err)
			}
			copy(fresh, view)
			if err := mmap.Unmap(fresh); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
}
