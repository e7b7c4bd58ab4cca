package names

import (
	"errors"
	"fmt"
)

// MaxDeviceUUIDLen bounds the length of a device UUID. Vendor UUIDs are far
// shorter (NVIDIA "GPU-" + 36, AMD "GPU-" + 16); the bound keeps a hostile
// plugin from producing paths of unbounded length.
const MaxDeviceUUIDLen = 128

// ErrInvalidUUID is matched by errors.Is for every *InvalidUUIDError.
var ErrInvalidUUID = errors.New("invalid device UUID")

// InvalidUUIDError reports a device UUID that may not be used in a path.
type InvalidUUIDError struct {
	UUID   string // the offending value, as received
	Reason string // what is wrong with it
}

func (e *InvalidUUIDError) Error() string {
	return fmt.Sprintf("invalid device UUID %s: %s (allowed: ASCII letters, digits and '-', 1 to %d characters)",
		QuoteTruncated(e.UUID, 80), e.Reason, MaxDeviceUUIDLen)
}

// Unwrap lets errors.Is(err, ErrInvalidUUID) match.
func (e *InvalidUUIDError) Unwrap() error { return ErrInvalidUUID }

// ValidateDeviceUUID checks that uuid is safe to put into a file name: 1 to
// MaxDeviceUUIDLen characters, each an ASCII letter, digit or '-'. Anything
// else — empty, "..", '/', NUL, spaces, non-ASCII — is an *InvalidUUIDError.
// The UUID comes from a backend plugin, so a broken or hostile plugin must
// not be able to steer a path outside its directory.
func ValidateDeviceUUID(uuid string) error {
	if uuid == "" {
		return &InvalidUUIDError{UUID: uuid, Reason: "empty"}
	}
	if len(uuid) > MaxDeviceUUIDLen {
		return &InvalidUUIDError{UUID: uuid, Reason: fmt.Sprintf("%d bytes long", len(uuid))}
	}
	for i := 0; i < len(uuid); i++ {
		c := uuid[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
		default:
			return &InvalidUUIDError{UUID: uuid, Reason: fmt.Sprintf("byte %d is %q", i, c)}
		}
	}
	return nil
}

// QuoteTruncated quotes s for an error message, shortening it to at most
// max bytes of input so that a hostile value cannot flood logs.
func QuoteTruncated(s string, max int) string {
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:max], len(s))
}
