package cli

import "github.com/wcache/wcache/sdk"

// humanBytes formats n with a binary unit, e.g. "80.0 GiB"
// (sdk.FormatSize); every command prints sizes this way.
func humanBytes(n uint64) string { return sdk.FormatSize(n) }
