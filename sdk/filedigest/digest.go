// Package filedigest is the content digest of a file as wcache records it:
// a two-level hash tree whose leaves are the file's consecutive
// LeafBytes-byte blocks. Leaves can be hashed in any order and on any
// goroutine, so the fill pipeline (sdk/fill) computes them while its
// readers pass the bytes to the device, without a second read; a client
// without the daemon's bytes hashes its own files the same way, at disk
// speed on several cores (File).
//
// A digest names its algorithm (Algorithm, the text before the colon).
// The digest of a file of size bytes under algorithm A with hash H is
//
//	A + ":" + hex(H(domain(A) || u64le(size) || leaf_0 || … || leaf_{n-1}))
//
// where leaf_i = H(bytes [i·LeafBytes, min((i+1)·LeafBytes, size))) and
// n = ceil(size / LeafBytes) (an empty file has no leaf):
//
//   - BLAKE3Tree ("blake3-tree-1m", the Default): H is
//     BLAKE3 with 32 bytes of output, domain "wcache-content-blake3-v1\x00".
//     About twice SHA-256's rate per core with the CPU's SIMD units
//     (lukechampine.com/blake3: AVX-512 or AVX2 over a leaf's 1 KiB
//     chunks); the Python client uses the blake3 wheel.
//   - SHA256Tree ("sha256-tree-1m", the first algorithm): H is
//     SHA-256, domain "wcache-content-v1\x00". Still verified wherever it
//     was recorded (a publish's records, a digest cache, an older peer):
//     whoever checks a digest computes it in the digest's own algorithm
//     (AlgorithmOf).
//
// The backend contract's Digest (sdk.Backend) stays SHA-256 of each range,
// so an arena's digest computed through a plugin (core/peer.ArenaDigest) is
// a SHA256Tree digest.
package filedigest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"lukechampine.com/blake3"
)

// LeafBytes is the size of a leaf: every leaf but the last is this long.
const LeafBytes = 1 << 20

// Algorithm names the hash of a content digest; it is the digest's text
// before the colon.
type Algorithm string

const (
	// SHA256Tree is SHA-256 leaves and root (the first algorithm).
	SHA256Tree Algorithm = "sha256-tree-1m"
	// BLAKE3Tree is BLAKE3-256 leaves and root.
	BLAKE3Tree Algorithm = "blake3-tree-1m"
	// Default is the algorithm new digests are computed in.
	Default = BLAKE3Tree
)

// Algorithms lists every algorithm this package computes, Default first.
func Algorithms() []Algorithm { return []Algorithm{BLAKE3Tree, SHA256Tree} }

// Sum is a leaf digest (32 bytes in every algorithm).
type Sum = [32]byte

// ErrUnknownAlgorithm is wrapped by AlgorithmOf and ParseAlgorithm for an
// algorithm this package does not compute (a newer writer's, or garbage).
var ErrUnknownAlgorithm = fmt.Errorf("unknown content digest algorithm")

// ParseAlgorithm returns the algorithm of that name; "" is SHA256Tree, the
// algorithm of every record written before algorithms had names on the
// wire (a plugin's FileLeaves without one, say).
func ParseAlgorithm(name string) (Algorithm, error) {
	switch Algorithm(name) {
	case "", SHA256Tree:
		return SHA256Tree, nil
	case BLAKE3Tree:
		return BLAKE3Tree, nil
	}
	return "", fmt.Errorf("%w %q", ErrUnknownAlgorithm, name)
}

// SameAlgorithm reports whether digests a and b are both valid content
// digests of one algorithm (false when either is malformed).
func SameAlgorithm(a, b string) bool {
	x, err := AlgorithmOf(a)
	if err != nil {
		return false
	}
	y, err := AlgorithmOf(b)
	return err == nil && x == y
}

// AlgorithmOf returns the algorithm of digest, checking that the rest is
// 64 lowercase hex digits; an error for anything else.
func AlgorithmOf(digest string) (Algorithm, error) {
	name, hx, ok := strings.Cut(digest, ":")
	if !ok {
		return "", fmt.Errorf("%q is not a content digest (no algorithm)", digest)
	}
	if name == "" {
		return "", fmt.Errorf("%q is not a content digest (no algorithm)", digest)
	}
	a, err := ParseAlgorithm(name)
	if err != nil {
		return "", err
	}
	if len(hx) != 64 || strings.ToLower(hx) != hx {
		return "", fmt.Errorf("%q is not a content digest (want 64 lowercase hex digits)", digest)
	}
	if _, err := hex.DecodeString(hx); err != nil {
		return "", fmt.Errorf("%q is not a content digest (want 64 lowercase hex digits)", digest)
	}
	return a, nil
}

// Valid reports whether d is a content digest in an algorithm this
// package computes.
func Valid(d string) bool {
	_, err := AlgorithmOf(d)
	return err == nil
}

// Prefix is what starts every digest of a.
func (a Algorithm) Prefix() string { return string(a) + ":" }

// domain separates the root hash from a plain hash of any file.
func (a Algorithm) domain() string {
	if a == BLAKE3Tree {
		return "wcache-content-blake3-v1\x00"
	}
	return "wcache-content-v1\x00"
}

// Leaf returns the leaf digest of p (at most LeafBytes bytes).
func (a Algorithm) Leaf(p []byte) Sum {
	if a == BLAKE3Tree {
		return blake3.Sum256(p)
	}
	return sha256.Sum256(p)
}

// LeafCount is the number of leaves of a file of size bytes.
func LeafCount(size int64) int64 {
	if size <= 0 {
		return 0
	}
	return (size + LeafBytes - 1) / LeafBytes
}

// LeafRange returns the byte range [off, off+n) of leaf i of a file of
// size bytes.
func LeafRange(size, i int64) (off, n int64) {
	off = i * LeafBytes
	return off, min(LeafBytes, size-off)
}

// Root returns the digest in a of a file of size bytes from its leaves
// (hashed in a), which must number LeafCount(size).
func (a Algorithm) Root(size int64, leaves []Sum) (string, error) {
	if int64(len(leaves)) != LeafCount(size) {
		return "", fmt.Errorf("content digest: %d leaves for a %d-byte file, want %d", len(leaves), size, LeafCount(size))
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(size))
	var sum []byte
	if a == BLAKE3Tree {
		h := blake3.New(32, nil)
		h.Write([]byte(a.domain()))
		h.Write(b[:])
		for i := range leaves {
			h.Write(leaves[i][:])
		}
		sum = h.Sum(nil)
	} else {
		h := sha256.New()
		h.Write([]byte(a.domain()))
		h.Write(b[:])
		for i := range leaves {
			h.Write(leaves[i][:])
		}
		sum = h.Sum(nil)
	}
	return a.Prefix() + hex.EncodeToString(sum), nil
}

// Bytes returns the digest in a of p, a whole file's content.
func (a Algorithm) Bytes(p []byte) string {
	size := int64(len(p))
	leaves := make([]Sum, LeafCount(size))
	for i := range leaves {
		off, n := LeafRange(size, int64(i))
		leaves[i] = a.Leaf(p[off : off+n])
	}
	d, _ := a.Root(size, leaves)
	return d
}

// Bytes is Default.Bytes.
func Bytes(p []byte) string { return Default.Bytes(p) }

// Verify reports whether digest is the digest of p in digest's own
// algorithm; an error for a digest of no known algorithm.
func Verify(digest string, p []byte) (bool, error) {
	a, err := AlgorithmOf(digest)
	if err != nil {
		return false, err
	}
	return a.Bytes(p) == digest, nil
}
