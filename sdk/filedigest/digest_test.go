package filedigest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"lukechampine.com/blake3"

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

// The definitions, spelled out once by hand (the Python mirror's vectors
// come from the same formulas).
func TestBytesMatchesDefinition(t *testing.T) {
	p := randomBytes(2*filedigest.LeafBytes+5, 1)
	cuts := [][2]int{{0, 1 << 20}, {1 << 20, 2 << 20}, {2 << 20, 2<<20 + 5}}
	size := []byte{5, 0, 32, 0, 0, 0, 0, 0} // 2 MiB + 5, little-endian

	// tree: the root hash h over the domain line, the size and each leaf's
	// hash (leaf), named prefix.
	tree := func(prefix string, h hash.Hash, domain string, leaf func([]byte) [32]byte) string {
		h.Write([]byte(domain))
		h.Write(size)
		for _, r := range cuts {
			s := leaf(p[r[0]:r[1]])
			h.Write(s[:])
		}
		return prefix + hex.EncodeToString(h.Sum(nil))
	}
	wantSHA := tree("sha256-tree-1m:", sha256.New(), "wcache-content-v1\x00", sha256.Sum256)
	wantB3 := tree("blake3-tree-1m:", blake3.New(32, nil), "wcache-content-blake3-v1\x00", blake3.Sum256)

	for alg, want := range map[filedigest.Algorithm]string{filedigest.SHA256Tree: wantSHA, filedigest.BLAKE3Tree: wantB3} {
		if got := alg.Bytes(p); got != want {
			t.Fatalf("%s Bytes = %s, want %s", alg, got, want)
		}
		if got, want := alg.Bytes(nil), alg.Bytes([]byte{}); got != want {
			t.Fatalf("%s empty: %s != %s", alg, got, want)
		}
		q := bytes.Clone(p)
		q[len(q)-1] ^= 1
		if alg.Bytes(q) == alg.Bytes(p) {
			t.Fatalf("%s: one flipped bit left the digest unchanged", alg)
		}
		if a, err := filedigest.AlgorithmOf(want); err != nil || a != alg {
			t.Fatalf("AlgorithmOf(%s) = %q, %v", want, a, err)
		}
	}
	if got := filedigest.Bytes(p); got != wantB3 {
		t.Fatalf("Bytes (the default) = %s, want the BLAKE3 digest %s", got, wantB3)
	}
}

// A digest recorded before BLAKE3 (in a digest cache, a publish's records,
// an older peer's offer) names SHA256Tree and verifies as such; a digest
// of another algorithm or of no known form does not.
func TestDigestsOfEitherAlgorithmVerify(t *testing.T) {
	// The SHA256Tree digest of 1 byte (content {0}), as a cache entry or
	// a peer's offer written with SHA-256 carries it.
	const old = "sha256-tree-1m:ad7f62cbd5da10034d26cd08c64faea887218754e13f29d78882346f27ae1c27"
	if ok, err := filedigest.Verify(old, []byte{0}); !ok || err != nil {
		t.Fatalf("Verify(old SHA-256 digest) = %v, %v", ok, err)
	}
	if ok, err := filedigest.Verify(old, []byte{1}); ok || err != nil {
		t.Fatalf("Verify(old digest, other bytes) = %v, %v; want false", ok, err)
	}
	b3 := filedigest.BLAKE3Tree.Bytes([]byte{0})
	if ok, err := filedigest.Verify(b3, []byte{0}); !ok || err != nil {
		t.Fatalf("Verify(BLAKE3 digest) = %v, %v", ok, err)
	}
	if b3[len("blake3-tree-1m:"):] == old[len("sha256-tree-1m:"):] {
		t.Fatal("the two algorithms gave the same hash")
	}
	for _, bad := range []string{"", "ad7f", "md5-tree-1m:" + old[15:], "sha256-tree-1m:" + old[16:],
		"sha256-tree-1m:" + strings.ToUpper(old[15:]), ":" + old[15:], "blake3-tree-1m:" + old[15:78] + "g"} {
		if filedigest.Valid(bad) {
			t.Errorf("Valid(%q) = true", bad)
		}
		if _, err := filedigest.Verify(bad, []byte{0}); err == nil {
			t.Errorf("Verify(%q) gave no error", bad)
		}
	}
	if _, err := filedigest.AlgorithmOf("md5-tree-1m:" + old[15:]); !errors.Is(err, filedigest.ErrUnknownAlgorithm) {
		t.Errorf("AlgorithmOf(md5…) = %v, want ErrUnknownAlgorithm", err)
	}
	if a, err := filedigest.ParseAlgorithm(""); a != filedigest.SHA256Tree || err != nil {
		t.Errorf(`ParseAlgorithm("") = %q, %v; want the legacy SHA256Tree`, a, err)
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
	for _, alg := range filedigest.Algorithms() {
		t.Run(string(alg), func(t *testing.T) { assembleAndComplete(t, alg, path, p) })
	}
}

func assembleAndComplete(t *testing.T, alg filedigest.Algorithm, path string, p []byte) {
	want := alg.Bytes(p)
	a := alg.NewAssembler(int64(len(p)))
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
	got, err := filedigest.Complete(context.Background(), path, int64(len(p)), leaves, filedigest.Options{Algorithm: alg})
	if err != nil || got != want {
		t.Fatalf("Complete = %s, %v; want %s", got, err, want)
	}
	var last int64
	got, err = filedigest.File(context.Background(), path, filedigest.Options{Algorithm: alg, Workers: 3, Progress: func(done, total int64) { last = done }})
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
