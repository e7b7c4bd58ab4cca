package names

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The handle kinds the core defines (docs/protocol.md, "Handle kinds").
// Every other kind is a vendor kind, named x-VENDOR-NAME.
const (
	KindPosixShm  = "posix-shm"   // Data: the path of a shared-memory file
	KindCUDAIPC   = "cuda-ipc"    // Data: a 64-byte cudaIpcMemHandle
	KindHIPIPC    = "hip-ipc"     // Data: a 64-byte hipIpcMemHandle
	KindMemfd     = "memfd"       // a sealed memfd passed over the descriptor channel; Data is empty
	KindCUDAVMMFD = "cuda-vmm-fd" // a CUDA VMM allocation's POSIX fd passed over the descriptor channel
)

// VendorPrefix starts every vendor handle kind.
const VendorPrefix = "x-"

// MaxHandleKindLen bounds a handle kind.
const MaxHandleKindLen = 64

// CoreKinds returns the core's handle kinds, sorted.
func CoreKinds() []string {
	k := []string{KindPosixShm, KindCUDAIPC, KindHIPIPC, KindMemfd, KindCUDAVMMFD}
	slices.Sort(k)
	return k
}

// ErrInvalidHandleKind is matched by every *InvalidHandleKindError.
var ErrInvalidHandleKind = errors.New("invalid handle kind")

// InvalidHandleKindError reports a handle kind that is neither one of the
// core's nor a well-formed vendor kind.
type InvalidHandleKindError struct {
	Kind   string
	Reason string
}

func (e *InvalidHandleKindError) Error() string {
	return fmt.Sprintf("invalid handle kind %s: %s (a kind is one of the core's, %s, or a vendor kind %sVENDOR-NAME: "+
		"lowercase letters and digits in '-'-separated words, at most %d characters, e.g. x-acme-buf)",
		QuoteTruncated(e.Kind, 80), e.Reason, strings.Join(CoreKinds(), ", "), VendorPrefix, MaxHandleKindLen)
}

// Unwrap lets errors.Is(err, ErrInvalidHandleKind) match.
func (e *InvalidHandleKindError) Unwrap() error { return ErrInvalidHandleKind }

// IsCoreKind reports whether kind is one of CoreKinds.
func IsCoreKind(kind string) bool { return slices.Contains(CoreKinds(), kind) }

// IsVendorKind reports whether kind is a well-formed vendor kind.
func IsVendorKind(kind string) bool { return validateVendorKind(kind) == "" }

// ValidateHandleKind accepts the core's kinds and vendor kinds
// x-VENDOR-NAME: "x-", a vendor word, '-', and one or more further words,
// each word 1+ lowercase ASCII letters or digits, at most MaxHandleKindLen
// bytes in all. Anything else is an *InvalidHandleKindError.
func ValidateHandleKind(kind string) error {
	if IsCoreKind(kind) {
		return nil
	}
	if reason := validateVendorKind(kind); reason != "" {
		return &InvalidHandleKindError{Kind: kind, Reason: reason}
	}
	return nil
}

// validateVendorKind returns "" for a well-formed vendor kind, else why not.
func validateVendorKind(kind string) string {
	switch {
	case kind == "":
		return "empty"
	case len(kind) > MaxHandleKindLen:
		return fmt.Sprintf("%d bytes long", len(kind))
	case !strings.HasPrefix(kind, VendorPrefix):
		return "not a core kind, and a vendor kind starts with " + VendorPrefix
	}
	words := strings.Split(strings.TrimPrefix(kind, VendorPrefix), "-")
	if len(words) < 2 {
		return "a vendor kind names the vendor and the kind: x-VENDOR-NAME"
	}
	for _, w := range words {
		if w == "" {
			return "empty word (two '-' in a row, or one at an end)"
		}
		for i := 0; i < len(w); i++ {
			if c := w[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
				return fmt.Sprintf("%q is not a lowercase letter or digit", c)
			}
		}
	}
	return ""
}

// Vendor returns the vendor word of a vendor kind ("acme" for x-acme-buf),
// or "" when kind is not one.
func Vendor(kind string) string {
	if !IsVendorKind(kind) {
		return ""
	}
	v, _, _ := strings.Cut(strings.TrimPrefix(kind, VendorPrefix), "-")
	return v
}
