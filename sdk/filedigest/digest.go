// Package filedigest is the content digest of a file as wcache records it:
// a two-level SHA-256 tree whose leaves are the file's consecutive
// LeafBytes-byte blocks. Leaves can be hashed in any order and on any
// goroutine, so the fill pipeline (sdk/fill) computes them while its
// readers pass the bytes to the device, without a second read; a client
// without the daemon's bytes hashes its own files the same way, at disk
// speed on several cores (File).
//
// The digest of a file of size bytes is
//
//	Prefix + hex(SHA-256("wcache-content-v1\x00" || u64le(size) || leaf_0 || … || leaf_{n-1}))
//
// where leaf_i = SHA-256(bytes [i·LeafBytes, min((i+1)·LeafBytes, size)))
// and n = ceil(size / LeafBytes) (an empty file has no leaf). SHA-256 is
// in the Go and Python standard libraries (hashlib), uses the CPU's SHA
// extensions where present, and needs no new dependency on either side.
package filedigest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// LeafBytes is the size of a leaf: every leaf but the last is this long.
const LeafBytes = 1 << 20

// Prefix starts every content digest.
const Prefix = "sha256-tree-1m:"

// domain separates the root hash from a plain SHA-256 of any file.
const domain = "wcache-content-v1\x00"

// Sum is a leaf digest.
type Sum = [sha256.Size]byte

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

// Root returns the digest of a file of size bytes from its leaves, which
// must number LeafCount(size).
func Root(size int64, leaves []Sum) (string, error) {
	if int64(len(leaves)) != LeafCount(size) {
		return "", fmt.Errorf("content digest: %d leaves for a %d-byte file, want %d", len(leaves), size, LeafCount(size))
	}
	h := sha256.New()
	h.Write([]byte(domain))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(size))
	h.Write(b[:])
	for i := range leaves {
		h.Write(leaves[i][:])
	}
	return Prefix + hex.EncodeToString(h.Sum(nil)), nil
}

// Bytes returns the digest of p, a whole file's content.
func Bytes(p []byte) string {
	size := int64(len(p))
	leaves := make([]Sum, LeafCount(size))
	for i := range leaves {
		off, n := LeafRange(size, int64(i))
		leaves[i] = sha256.Sum256(p[off : off+n])
	}
	d, _ := Root(size, leaves)
	return d
}
