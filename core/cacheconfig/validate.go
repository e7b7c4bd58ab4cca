package cacheconfig

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalidConfig is wrapped by every *FieldError Validate returns.
var ErrInvalidConfig = errors.New("invalid cache config")

// FieldError is one problem Validate found.
type FieldError struct {
	Field  string // proto field name, e.g. "tp_rank" or "extra.<key>"
	Reason string
}

func (e *FieldError) Error() string { return "cache config: " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidConfig.
func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

// Validate checks c and returns every problem at once (errors.Join of
// *FieldError, each wrapping ErrInvalidConfig), or nil:
//   - model or checkpoint_digest must be set (something must name the weights);
//   - checkpoint_digest, when set, must be "sha256:" and 64 lowercase hex digits;
//   - tp/pp/dp/ep sizes must be at least 1 and each rank below its size;
//   - protocol_version must be at least 1;
//   - every string must be valid UTF-8 (proto3 requires it) and extra keys
//     must not be empty.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if c.Model == "" && c.CheckpointDigest == "" {
		bad(FieldModel, "neither model nor checkpoint_digest is set")
	}
	if c.CheckpointDigest != "" && !isDigest(c.CheckpointDigest) {
		bad(FieldCheckpointDigest, "%q is not \"sha256:\" followed by 64 lowercase hex digits", c.CheckpointDigest)
	}
	for _, p := range []struct {
		size, rank uint32
		sizeName   string
		rankName   string
	}{
		{c.TPSize, c.TPRank, FieldTPSize, FieldTPRank},
		{c.PPSize, c.PPRank, FieldPPSize, FieldPPRank},
		{c.DPSize, c.DPRank, FieldDPSize, FieldDPRank},
		{c.EPSize, c.EPRank, FieldEPSize, FieldEPRank},
	} {
		if p.size == 0 {
			bad(p.sizeName, "must be at least 1")
		} else if p.rank >= p.size {
			bad(p.rankName, "%d is not below %s %d", p.rank, p.sizeName, p.size)
		}
	}
	if c.ProtocolVersion == 0 {
		bad(FieldProtocolVersion, "must be at least 1")
	}
	for _, f := range c.fields() {
		if !utf8.ValidString(f.name) {
			bad(strings.ToValidUTF8(f.name, "\uFFFD"), "key is not valid UTF-8")
		} else if !utf8.ValidString(f.value) {
			bad(f.name, "value is not valid UTF-8")
		}
	}
	if _, ok := c.Extra[""]; ok {
		bad(ExtraPrefix, "extra key is empty")
	}
	return errors.Join(errs...)
}

// isDigest reports whether s is "sha256:" + 64 lowercase hex digits.
func isDigest(s string) bool {
	hex, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
