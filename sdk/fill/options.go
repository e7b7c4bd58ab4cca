package fill

import (
	"fmt"
	"runtime"
)

// Defaults of Options.
const (
	// MaxDefaultReaders caps the default reader count.
	MaxDefaultReaders = 8
	// DefaultBuffers is the depth of each reader's ring: one buffer
	// being read into while the other's copy runs.
	DefaultBuffers = 2
	// DefaultBufferBytes is the size of each staging buffer.
	DefaultBufferBytes = 16 << 20
)

// DirectMode says when source files are read with O_DIRECT.
type DirectMode int

const (
	// DirectAuto (the default) reads a file with O_DIRECT when most of a
	// sample of its pages is not in the page cache, buffered otherwise.
	DirectAuto DirectMode = iota
	// DirectNever always reads buffered.
	DirectNever
	// DirectAlways tries O_DIRECT for every file, resident or not.
	DirectAlways
)

func (m DirectMode) String() string {
	switch m {
	case DirectAuto:
		return "auto"
	case DirectNever:
		return "never"
	case DirectAlways:
		return "always"
	}
	return fmt.Sprintf("DirectMode(%d)", int(m))
}

// Options tune a Fill. The zero value selects every default.
type Options struct {
	// Readers is the number of reader goroutines (default
	// min(MaxDefaultReaders, runtime.NumCPU())). A Fill of fewer chunks
	// starts fewer.
	Readers int
	// Buffers is the number of staging buffers per reader (default
	// DefaultBuffers).
	Buffers int
	// BufferBytes is the size of each staging buffer and so the largest
	// chunk: a positive multiple of Alignment (default
	// DefaultBufferBytes).
	BufferBytes int
	// Direct says when to use O_DIRECT (default DirectAuto).
	Direct DirectMode
	// NoDigest turns off the content digest: by default each reader
	// hashes the chunks it read (sdk/filedigest leaves) after queueing
	// their copy, while the copy runs, and Fill returns the leaves in
	// LoadStats.Leaves.
	NoDigest bool

	// pread replaces unix.Pread in tests, to inject errors.
	pread func(fd int, p []byte, off int64) (int, error)
}

// withDefaults fills unset fields and validates the rest.
func (o Options) withDefaults() (Options, error) {
	if o.Readers == 0 {
		o.Readers = DefaultReaders()
	}
	if o.Buffers == 0 {
		o.Buffers = DefaultBuffers
	}
	if o.BufferBytes == 0 {
		o.BufferBytes = DefaultBufferBytes
	}
	switch {
	case o.Readers < 0:
		return o, fmt.Errorf("fill: %d readers", o.Readers)
	case o.Buffers < 0:
		return o, fmt.Errorf("fill: %d buffers per reader", o.Buffers)
	case o.BufferBytes < 0 || o.BufferBytes%Alignment != 0:
		return o, fmt.Errorf("fill: buffer of %d bytes is not a positive multiple of %d", o.BufferBytes, Alignment)
	case o.Direct < DirectAuto || o.Direct > DirectAlways:
		return o, fmt.Errorf("fill: unknown %v", o.Direct)
	}
	return o, nil
}

// DefaultReaders is the reader count of Options{}: min(MaxDefaultReaders,
// runtime.NumCPU()). A backend that sizes a pool of lanes to the readers
// uses it.
func DefaultReaders() int { return min(MaxDefaultReaders, runtime.NumCPU()) }
