package cacheconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// DigestPrefix starts every digest this package produces.
const DigestPrefix = "sha256:"

// Canonical returns the canonical encoding of c: for every field — all of
// them, zero values included, and each extra entry as the field
// "extra.<key>" — sorted by name in byte order, the bytes
//
//	<len(name)>:<name><len(value)>:<value>
//
// concatenated, where lengths are decimal byte counts, integers are written
// in decimal and strings as their raw UTF-8. Length prefixes make it
// unambiguous whatever the values contain.
func (c Config) Canonical() string {
	var b []byte
	for _, f := range c.fields() {
		b = appendLenPrefixed(b, f.name)
		b = appendLenPrefixed(b, f.value)
	}
	return string(b)
}

// Digest is "sha256:" followed by the lowercase hex SHA-256 of Canonical().
// Equal digests mean identical configurations; whether two configurations
// are compatible is Compare's decision (it normalises model paths).
func (c Config) Digest() string {
	sum := sha256.Sum256([]byte(c.Canonical()))
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// appendLenPrefixed appends "<len>:<s>".
func appendLenPrefixed(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
