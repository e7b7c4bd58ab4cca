package hubcache

import "strings"

// The name checks below are hand-written rather than regular expressions:
// package-level regexps are compiled in every process that links this
// package (every wcache command), ~45 µs at start-up for these three.

// isBlobName reports whether name is a hub blob's file name: the
// lowercase-hex SHA-256 of an LFS file's content (safetensors files are LFS
// files), 64 digits.
func isBlobName(name string) bool {
	if len(name) != 64 {
		return false
	}
	for i := range len(name) {
		if c := name[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isRepoID reports whether id is a hub repo id: exactly one "/" between two
// names of letters, digits, '-', '_' and '.', neither starting with '.' or
// '-'.
func isRepoID(id string) bool {
	org, name, ok := strings.Cut(id, "/")
	return ok && isName(org, "") && isName(name, "")
}

// isRevision reports whether rev is a revision (a branch, tag or commit):
// letters, digits, '-', '_', '.' and '/', not starting with '.', '-' or
// '/', and without "..".
func isRevision(rev string) bool {
	return isName(rev, "/") && !strings.Contains(rev, "..")
}

// isName reports whether s is non-empty, starts with a letter, digit or
// '_', and goes on with those, '.', '-' and the bytes of more.
func isName(s, more string) bool {
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case i > 0 && (c == '.' || c == '-' || strings.IndexByte(more, c) >= 0):
		default:
			return false
		}
	}
	return s != ""
}
