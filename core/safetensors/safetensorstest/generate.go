package safetensorstest

import "github.com/wcache/wcache/core/safetensors/synth"

// The checkpoint generator is product code (wcache demo uses it); these
// names keep the tests that generate checkpoints unchanged.
type (
	// GenOptions shapes a generated checkpoint (synth.Options).
	GenOptions = synth.Options
	// GeneratedTensor is one generated tensor (synth.Tensor).
	GeneratedTensor = synth.Tensor
	// Result describes a generated checkpoint (synth.Result).
	Result = synth.Result
	// Stream is the deterministic byte stream of tensor data (synth.Stream).
	Stream = synth.Stream
)

// GenerateCheckpoint is synth.Generate.
func GenerateCheckpoint(dir string, opts GenOptions) (*Result, error) {
	return synth.Generate(dir, opts)
}

// NewStream is synth.NewStream.
func NewStream(seed uint64) *Stream { return synth.NewStream(seed) }

// TensorSeed is synth.TensorSeed.
func TensorSeed(seed uint64, rank int, name string) uint64 { return synth.TensorSeed(seed, rank, name) }

// StreamBytes is synth.StreamBytes.
func StreamBytes(seed uint64, n int) []byte { return synth.StreamBytes(seed, n) }
