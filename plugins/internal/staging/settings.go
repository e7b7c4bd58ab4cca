package staging

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fill"
)

// Limits on the staging settings.
const (
	DefaultBytes   = 16 << 20
	MinBytes       = fill.Alignment
	MaxBytes       = 4 << 30
	DefaultBuffers = 2
	MaxBuffers     = 8
	MaxReaders     = 64
)

// Settings are a GPU backend's fill settings: pinned staging buffers per
// reader, readers per device, O_DIRECT. Pinned staging memory per device
// is Readers × Buffers × Bytes (256 MiB with 8 readers and the defaults).
type Settings struct {
	// Bytes is the size of each pinned staging buffer: a multiple of 4096
	// in [MinBytes, MaxBytes].
	Bytes int
	// Buffers is how many staging buffers rotate in each reader's ring, in
	// [2, MaxBuffers]: while the GPU copies one, the next is read into.
	Buffers int
	// Readers is the number of fill readers per device, in [0,
	// MaxReaders]; 0 selects sdk/fill's default, min(8, CPUs).
	Readers int
	// DirectIO reads checkpoint files with O_DIRECT where the filesystem
	// allows it and their pages are not in the page cache.
	DirectIO bool
}

// DefaultSettings returns 2 × 16 MiB per reader, the default reader
// count, O_DIRECT on.
func DefaultSettings() Settings {
	return Settings{Bytes: DefaultBytes, Buffers: DefaultBuffers, DirectIO: true}
}

// EnvNames name the variables that override Settings.
type EnvNames struct{ Bytes, Buffers, Readers, DirectIO string }

// EnvNamesWithPrefix returns PREFIX_STAGING_BYTES, PREFIX_STAGING_BUFFERS,
// PREFIX_READERS and PREFIX_DIRECT_IO.
func EnvNamesWithPrefix(prefix string) EnvNames {
	return EnvNames{Bytes: prefix + "_STAGING_BYTES", Buffers: prefix + "_STAGING_BUFFERS",
		Readers: prefix + "_READERS", DirectIO: prefix + "_DIRECT_IO"}
}

// Override sets the fields whose variables getenv returns non-empty: a
// byte count with an optional unit (sdk.ParseSize), integers, and 1/0 for
// DirectIO. A malformed value is an error naming the variable; the result
// is not validated (see Validate).
func (s Settings) Override(getenv func(string) string, n EnvNames) (Settings, error) {
	if v := strings.TrimSpace(getenv(n.Bytes)); v != "" {
		b, err := sdk.ParseSize(v)
		if err != nil || b > MaxBytes {
			return s, fmt.Errorf("%s=%q: want a byte count up to %d", n.Bytes, v, MaxBytes)
		}
		s.Bytes = int(b)
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{n.Buffers, &s.Buffers}, {n.Readers, &s.Readers}} {
		if v := strings.TrimSpace(getenv(f.name)); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil {
				return s, fmt.Errorf("%s=%q: want an integer", f.name, v)
			}
			*f.dst = i
		}
	}
	if v := strings.TrimSpace(getenv(n.DirectIO)); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("%s=%q: want 1 or 0", n.DirectIO, v)
		}
		s.DirectIO = on
	}
	return s, nil
}

// Validate checks the ranges; errors name the variables of n.
func (s Settings) Validate(n EnvNames) error {
	if s.Bytes < MinBytes || s.Bytes > MaxBytes || s.Bytes%fill.Alignment != 0 {
		return fmt.Errorf("staging buffer size %d: want a multiple of %d between %d and %d bytes (%s)",
			s.Bytes, fill.Alignment, MinBytes, MaxBytes, n.Bytes)
	}
	if s.Buffers < 2 || s.Buffers > MaxBuffers {
		return fmt.Errorf("staging buffer count %d: want 2 to %d (%s)", s.Buffers, MaxBuffers, n.Buffers)
	}
	if s.Readers < 0 || s.Readers > MaxReaders {
		return fmt.Errorf("reader count %d: want 0 (default) to %d (%s)", s.Readers, MaxReaders, n.Readers)
	}
	return nil
}

// FillOptions returns the sdk/fill options of these settings.
func (s Settings) FillOptions() fill.Options {
	direct := fill.DirectNever
	if s.DirectIO {
		direct = fill.DirectAuto
	}
	return fill.Options{Readers: s.Readers, Buffers: s.Buffers, BufferBytes: s.Bytes, Direct: direct}
}

// Lanes returns how many fill lanes a device gets: Readers, or sdk/fill's
// default when 0.
func (s Settings) Lanes() int {
	if s.Readers == 0 {
		return fill.DefaultReaders()
	}
	return s.Readers
}
