package filedigest_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wcache/wcache/sdk/filedigest"
)

// BenchmarkLeafSHA256 is the rate of one core hashing 1 MiB leaves.
func BenchmarkLeafSHA256(b *testing.B) {
	p := randomBytes(filedigest.LeafBytes, 5)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		sha256.Sum256(p)
	}
}

// BenchmarkLeafBLAKE3 is the rate of one core hashing 1 MiB leaves with
// BLAKE3 (the Default algorithm).
func BenchmarkLeafBLAKE3(b *testing.B) {
	p := randomBytes(filedigest.LeafBytes, 5)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		filedigest.BLAKE3Tree.Leaf(p)
	}
}

// BenchmarkHashVsRead hashes a WCACHE_BENCH_HASH_MIB (default 256) MiB
// file in the page cache with File (8 workers) and reads it with as many
// goroutines doing the same 1 MiB preads and nothing else: the ratio of
// the rates says whether hashing an unknown copy is the bottleneck.
func BenchmarkHashVsRead(b *testing.B) {
	size := 256 << 20
	if v, err := strconv.Atoi(os.Getenv("WCACHE_BENCH_HASH_MIB")); err == nil && v > 0 {
		size = v << 20
	}
	path := filepath.Join(b.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 64<<20)
	r := rand.NewChaCha8([32]byte{6})
	for left := size; left > 0; left -= len(chunk) {
		r.Read(chunk)
		if _, err := f.Write(chunk[:min(left, len(chunk))]); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("hash/workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := filedigest.File(context.Background(), path, filedigest.Options{Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("read/workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				readAll(b, path, size, workers)
			}
		})
	}
}

func readAll(b *testing.B, path string, size, workers int) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, filedigest.LeafBytes)
			for {
				off := (next.Add(1) - 1) * filedigest.LeafBytes
				if off >= int64(size) {
					return
				}
				if _, err := f.ReadAt(buf[:min(filedigest.LeafBytes, int64(size)-off)], off); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
