package filedigest_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/sdk/filedigest"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

// vectorBytes is the content of a vector of size bytes: byte i is
// (31·i + i>>11) mod 256 (the Python mirror computes the same).
func vectorBytes(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(31*i + i>>11)
	}
	return p
}

type vector struct {
	Size   int    `json:"size"`
	Digest string `json:"digest"`
}

// The vectors the Python client checks its digest against
// (clients/python/tests/test_content.py): each size in SHA256Tree (the
// entries committed before BLAKE3, unchanged), then in BLAKE3Tree. The
// digest names its algorithm.
func TestVectors(t *testing.T) {
	path := filepath.Join("testdata", "vectors.json")
	var vs []vector
	for _, alg := range []filedigest.Algorithm{filedigest.SHA256Tree, filedigest.BLAKE3Tree} {
		for _, size := range []int{0, 1, filedigest.LeafBytes - 1, filedigest.LeafBytes, filedigest.LeafBytes + 1, 2*filedigest.LeafBytes + 12345} {
			vs = append(vs, vector{Size: size, Digest: alg.Bytes(vectorBytes(size))})
		}
	}
	want, err := json.MarshalIndent(vs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != string(want) {
		t.Fatalf("%s is stale (go test ./sdk/filedigest -update): %v", path, err)
	}
}
