package cacheconfig

import "unicode/utf8"

// Limits BoundDiffs applies, so that a mismatch detail fits the 8 KiB of
// metadata gRPC clients accept by default (grpc-core's soft limit) even
// after base64, next to a short status message.
const (
	// MaxDiffValueBytes bounds a diff's field name and each of its values.
	MaxDiffValueBytes = 256
	// MaxMismatchBytes bounds the field names and values of the diffs kept.
	MaxMismatchBytes = 3072
)

// diffOverhead approximates the protobuf framing of one FieldDiff (tags,
// lengths, flags), counted against MaxMismatchBytes.
const diffOverhead = 16

// BoundDiffs returns the diffs a daemon sends: each field name and value cut
// to MaxDiffValueBytes (at a UTF-8 boundary, Truncated set), and diffs kept
// in order while their names and values total at most MaxMismatchBytes; the
// first diff is always kept. omitted is the number left out.
func BoundDiffs(diffs []FieldDiff) (kept []FieldDiff, omitted int) {
	total := 0
	for i, d := range diffs {
		var cut bool
		d.Field, cut = truncateUTF8(d.Field, MaxDiffValueBytes, cut)
		d.Daemon, cut = truncateUTF8(d.Daemon, MaxDiffValueBytes, cut)
		d.Client, cut = truncateUTF8(d.Client, MaxDiffValueBytes, cut)
		d.Truncated = d.Truncated || cut
		size := len(d.Field) + len(d.Daemon) + len(d.Client) + diffOverhead
		if i > 0 && total+size > MaxMismatchBytes {
			return kept, len(diffs) - i
		}
		total += size
		kept = append(kept, d)
	}
	return kept, 0
}

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8
// sequence; cut is true when this or an earlier call cut something.
func truncateUTF8(s string, n int, cut bool) (string, bool) {
	if len(s) <= n {
		return s, cut
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}
