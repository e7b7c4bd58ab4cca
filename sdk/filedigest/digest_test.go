package filedigest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/wcache/wcache/sdk/filedigest"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// The definition, spelled out once by hand (the Python mirror's vectors
// come from the same formula).
func TestBytesMatchesDefinition(t *testing.T) {
	p := randomBytes(2*filedigest.LeafBytes+5, 1)
	h := sha256.New()
	h.Write([]byte("wcache-content-v1\x00"))
	h.Write([]byte{5, 0, 32, 0, 0, 0, 0, 0}) // 2 MiB + 5, little-endian
	for _, r := range [][2]int{{0, 1 << 20}, {1 << 20, 2 << 20}, {2 << 20, 2<<20 + 5}} {
		s := sha256.Sum256(p[r[0]:r[1]])
		h.Write(s[:])
	}
	want := filedigest.Prefix + hex.EncodeToString(h.Sum(nil))
	if got := filedigest.Bytes(p); got != want {
		t.Fatalf("Bytes = %s, want %s", got, want)
	}
	if got, want := filedigest.Bytes(nil), filedigest.Bytes([]byte{}); got != want {
		t.Fatalf("empty: %s != %s", got, want)
	}
	q := bytes.Clone(p)
	q[len(q)-1] ^= 1
	if filedigest.Bytes(q) == filedigest.Bytes(p) {
		t.Fatal("one flipped bit left the digest unchanged")
	}
}

// Pieces written in any order from many goroutines, then completed from
// the file, give the digest of the whole file.
func TestAssemblerAndComplete(t *testing.T) {
	p := randomBytes(5*filedigest.LeafBytes+12345, 2)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, p, 0o600); err != nil {
		t.Fatal(err)
	}
	want := filedigest.Bytes(p)
	a := filedigest.NewAssembler(int64(len(p)))
	// Skip a "header" of 100 bytes and cut the rest at odd places.
	cuts := []int{100, 700_000, 1 << 20, 3<<20 + 17, 3<<20 + 18, len(p)}
	var wg sync.WaitGroup
	for k := len(cuts) - 2; k >= 0; k-- {
		lo, hi := cuts[k], cuts[k+1]
		wg.Go(func() { a.Write(int64(lo), p[lo:hi]) })
	}
	wg.Wait()
	leaves := a.Leaves()
	if len(leaves) != 5 { // leaf 0 lacks its first 100 bytes
		t.Fatalf("%d leaves assembled, want 5 (all but the first): %v", len(leaves), leaves)
	}
	got, err := filedigest.Complete(context.Background(), path, int64(len(p)), leaves, filedigest.Options{})
	if err != nil || got != want {
		t.Fatalf("Complete = %s, %v; want %s", got, err, want)
	}
	var last int64
	got, err = filedigest.File(context.Background(), path, filedigest.Options{Workers: 3, Progress: func(done, total int64) { last = done }})
	if err != nil || got != want || last != int64(len(p)) {
		t.Fatalf("File = %s, %v (progress %d); want %s", got, err, last, want)
	}
	if _, err := filedigest.Complete(context.Background(), path, int64(len(p))+1, nil, filedigest.Options{}); err == nil {
		t.Fatal("Complete with the wrong size succeeded")
	}
}

// Overlapping pieces never produce a leaf.
func TestAssemblerOverlap(t *testing.T) {
	p := randomBytes(filedigest.LeafBytes, 3)
	a := filedigest.NewAssembler(int64(len(p)))
	a.Write(0, p[:600_000])
	a.Write(500_000, p[500_000:])
	a.Write(0, p[:100]) // no completion either
	if l := a.Leaves(); len(l) != 0 {
		t.Fatalf("overlap produced leaves %v", l)
	}
}
