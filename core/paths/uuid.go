package paths

import "github.com/wcache/wcache/sdk/names"

// The device UUID rule lives in sdk/names, its single source: the sdk's
// conformance suite (which may not import the core) applies the same rule
// to a backend's UUIDs as the core applies before a UUID names a file.

// MaxDeviceUUIDLen bounds the length of a device UUID (names.MaxDeviceUUIDLen).
const MaxDeviceUUIDLen = names.MaxDeviceUUIDLen

// ErrInvalidUUID is matched by errors.Is for every *InvalidUUIDError.
var ErrInvalidUUID = names.ErrInvalidUUID

// InvalidUUIDError reports a device UUID that may not be used in a path.
type InvalidUUIDError = names.InvalidUUIDError

// ValidateDeviceUUID checks that uuid is safe to put into a file name: 1 to
// MaxDeviceUUIDLen characters, each an ASCII letter, digit or '-'. Anything
// else — empty, "..", '/', NUL, spaces, non-ASCII — is an *InvalidUUIDError.
// The UUID comes from a backend plugin, so a broken or hostile plugin must not
// be able to steer a path outside its directory.
func ValidateDeviceUUID(uuid string) error { return names.ValidateDeviceUUID(uuid) }

// quoteTruncated quotes s for an error message, shortening it to at most max
// bytes of input so that a hostile value cannot flood logs.
func quoteTruncated(s string, max int) string { return names.QuoteTruncated(s, max) }
