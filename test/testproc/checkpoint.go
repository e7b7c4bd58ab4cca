package testproc

import (
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// ModelSpec asks for a generated llama-like checkpoint of about Bytes bytes
// holding about Tensors tensors, in Files files (0: files of at most
// maxShardBytes).
type ModelSpec struct {
	Bytes   uint64
	Tensors int
	Files   int
}

// Name is a short directory name for the spec, e.g. "4096MiB-300t" or
// "256MiB-300t-8f".
func (s ModelSpec) Name() string {
	if s.Files > 0 {
		return fmt.Sprintf("%dMiB-%dt-%df", s.Bytes>>20, s.Tensors, s.Files)
	}
	return fmt.Sprintf("%dMiB-%dt", s.Bytes>>20, s.Tensors)
}

// Model is a generated checkpoint on disk.
type Model struct {
	Spec    ModelSpec `json:"-"`
	Dir     string    `json:"-"`
	Files   []string  `json:"-"`
	Bytes   uint64    `json:"bytes"`
	Tensors int       `json:"tensors"`
	Shards  int       `json:"shards"`
	Hidden  int       `json:"hidden_size"`
	Layers  int       `json:"layers"`
}

// MinTensors is the fewest tensors a ModelSpec may ask for: one layer.
const MinTensors = extraTensors + tensorsPerLayer

// Llama-like shape constants: every decoder layer has 9 tensors (two
// norms, q/k/v/o, gate/up/down); the model adds embed_tokens, norm and
// lm_head. The vocabulary is vocabPerHidden × H and the MLP 3 × H.
const (
	tensorsPerLayer = 9
	extraTensors    = 3
	vocabPerHidden  = 8
	// maxShardBytes is the largest file the generator writes (Hugging Face
	// checkpoints are cut in files of a few GB too).
	maxShardBytes = 2 << 30
	// hiddenMultiple keeps H a multiple of 16 (and ≥ 16).
	hiddenMultiple = 16
)

// genOptions turns a spec into generator options: layers from the tensor
// count, H solved from the byte count (BF16), shards of at most
// maxShardBytes.
func genOptions(s ModelSpec) (safetensorstest.GenOptions, error) {
	layers := (s.Tensors - extraTensors) / tensorsPerLayer
	if layers < 1 {
		return safetensorstest.GenOptions{}, fmt.Errorf("model of %d tensors: need at least %d", s.Tensors, extraTensors+tensorsPerLayer)
	}
	// bytes = 2 · (2·V·H + L·(13·H² + 2·H) + H) with V = 8H:
	//       ≈ 2 · H² · (16 + 13·L)
	h := math.Sqrt(float64(s.Bytes) / (2 * float64(2*vocabPerHidden+13*layers)))
	hidden := max(hiddenMultiple, int(math.Round(h/hiddenMultiple))*hiddenMultiple)
	o := safetensorstest.GenOptions{Layers: layers, HiddenSize: hidden, VocabSize: vocabPerHidden * hidden,
		DType: safetensors.BF16, Seed: uint64(s.Bytes) ^ uint64(s.Tensors)}
	total := modelBytes(o)
	o.Shards = int(min((total+maxShardBytes-1)/maxShardBytes, uint64(s.Tensors)))
	o.Shards = max(o.Shards, 1)
	if s.Files > 0 {
		o.Shards = s.Files
	}
	return o, nil
}

// modelBytes is the tensor bytes the generator will write for o (BF16,
// KV = H, MLP = 3H, untied embeddings).
func modelBytes(o safetensorstest.GenOptions) uint64 {
	h, v, l := uint64(o.HiddenSize), uint64(o.VocabSize), uint64(o.Layers)
	elems := 2*v*h + l*(4*h*h+3*3*h*h+2*h) + h
	return 2 * elems
}

// GenerateModel writes the checkpoint of s into filepath.Join(root,
// s.Name()) and reports how long it took.
func GenerateModel(root string, s ModelSpec) (*Model, time.Duration, error) {
	o, err := genOptions(s)
	if err != nil {
		return nil, 0, err
	}
	dir := filepath.Join(root, s.Name())
	start := time.Now()
	res, err := safetensorstest.GenerateCheckpoint(dir, o)
	if err != nil {
		return nil, 0, fmt.Errorf("generate %s: %w", s.Name(), err)
	}
	took := time.Since(start)
	return &Model{Spec: s, Dir: dir, Files: res.Files, Bytes: res.TotalBytes, Tensors: len(res.Tensors),
		Shards: o.Shards, Hidden: o.HiddenSize, Layers: o.Layers}, took, nil
}

// EngineConfig is the CacheConfig an engine sends for the checkpoint in
// dir on a device of capability: the defaults, the model path and the
// header digest of the whole checkpoint, or of files when given
// (pre-sharded ranks).
func EngineConfig(dir, capability string, files ...string) (cacheconfig.Config, error) {
	var ck *safetensors.Checkpoint
	var err error
	if len(files) > 0 {
		ck, err = safetensors.OpenFiles(files)
	} else {
		ck, err = safetensors.OpenCheckpoint(dir)
	}
	if err != nil {
		return cacheconfig.Config{}, err
	}
	c := cacheconfig.Default()
	c.Model, c.CheckpointDigest, c.DeviceCapability = filepath.Clean(dir), cacheconfig.CheckpointDigest(ck), capability
	return c, nil
}
