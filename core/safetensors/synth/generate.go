package synth

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/wcache/wcache/core/safetensors"
)

// Options shapes a generated llama-like checkpoint. Zero fields take the
// defaults in brackets.
type Options struct {
	Layers           int               // decoder layers [2]
	HiddenSize       int               // hidden size H [64]
	IntermediateSize int               // MLP size [3·H]
	KVSize           int               // output size of k_proj and v_proj [H]
	VocabSize        int               // vocabulary [128]
	DType            safetensors.DType // BF16, F16 or F32 [BF16]
	// Shards is the number of files (per rank when TPSize > 0) [1]. Tensors
	// are split into contiguous groups of about equal bytes; there must be
	// at least as many tensors as shards.
	Shards int
	// NoIndex leaves out model.safetensors.index.json. Without it a
	// single-shard checkpoint is one model.safetensors; otherwise shards are
	// model-00001-of-0000N.safetensors named by the index.
	NoIndex bool
	// TiedEmbeddings leaves out lm_head.weight.
	TiedEmbeddings bool
	// Seed selects the pseudo-random contents [0].
	Seed uint64
	// TPSize > 0 writes the per-rank pre-sharded layout instead: for each
	// rank r < TPSize, files model-rank-{r}-part-{i}.safetensors (i from 0)
	// holding that rank's slices — column-parallel weights (q/k/v, gate/up,
	// embed_tokens, lm_head) split on dimension 0, row-parallel ones (o_proj,
	// down_proj) on dimension 1, norms replicated — and no index. H, KVSize,
	// IntermediateSize and VocabSize must be divisible by TPSize.
	TPSize int
	// Metadata is each file's "__metadata__" [{"format": "pt"}].
	Metadata map[string]string
}

// Tensor is one tensor Generate wrote.
type Tensor struct {
	Name  string
	File  string // path of the file holding it
	Rank  int    // tensor-parallel rank (0 unless TPSize > 0)
	DType safetensors.DType
	Shape []uint64
	Bytes uint64
	Seed  uint64 // its data is StreamBytes(Seed, Bytes)
}

// Data regenerates the tensor's bytes (allocates Bytes bytes).
func (t Tensor) Data() []byte { return StreamBytes(t.Seed, int(t.Bytes)) }

// Result describes a generated checkpoint.
type Result struct {
	Dir       string
	Files     []string // every file written, sorted by base name
	IndexPath string   // "" when no index was written
	Tensors   []Tensor
	// TotalBytes is the sum of all tensor bytes (over all ranks).
	TotalBytes uint64
	ranks      [][]string
}

// RankFiles returns the files of one tensor-parallel rank in part order; for
// a checkpoint without TPSize, rank 0 is every file.
func (r *Result) RankFiles(rank int) []string {
	if rank < 0 || rank >= len(r.ranks) {
		return nil
	}
	return slices.Clone(r.ranks[rank])
}

// Tensor returns the generated tensor called name on rank, and false when
// there is none.
func (r *Result) Tensor(rank int, name string) (Tensor, bool) {
	for _, t := range r.Tensors {
		if t.Rank == rank && t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Generate writes a llama-like checkpoint into dir (created if
// missing): model.embed_tokens.weight, per layer
// model.layers.{i}.{input_layernorm,post_attention_layernorm}.weight,
// self_attn.{q,k,v,o}_proj.weight and mlp.{gate,up,down}_proj.weight, then
// model.norm.weight and lm_head.weight. Tensor bytes are streamed from a
// per-tensor Stream (see TensorSeed) through a 1 MiB buffer, so memory use
// does not grow with the checkpoint size. Existing files of the same names
// are replaced.
func Generate(dir string, opts Options) (*Result, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	res := &Result{Dir: dir}
	ranks := max(o.TPSize, 1)
	buf := make([]byte, 1<<20)
	for rank := range ranks {
		specs := o.tensors()
		groups, err := splitShards(specs, o.Shards)
		if err != nil {
			return nil, err
		}
		var files []string
		weightMap := make(map[string]string)
		for part, group := range groups {
			name := o.fileName(rank, part)
			path := filepath.Join(dir, name)
			written, err := writeGenerated(path, group, o, rank, buf)
			if err != nil {
				return nil, err
			}
			for _, t := range written {
				weightMap[t.Name] = name
				res.TotalBytes += t.Bytes
			}
			res.Tensors = append(res.Tensors, written...)
			files = append(files, path)
		}
		res.ranks = append(res.ranks, files)
		res.Files = append(res.Files, files...)
		if o.TPSize == 0 && !o.NoIndex {
			res.IndexPath = filepath.Join(dir, safetensors.IndexFileName)
			if err := writeIndex(res.IndexPath, weightMap, res.TotalBytes); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(res.Files, func(a, b string) int { return cmp.Compare(filepath.Base(a), filepath.Base(b)) })
	return res, nil
}

// withDefaults fills zero fields and checks the rest.
func (o Options) withDefaults() (Options, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Layers, 2)
	def(&o.HiddenSize, 64)
	def(&o.IntermediateSize, 3*o.HiddenSize)
	def(&o.KVSize, o.HiddenSize)
	def(&o.VocabSize, 128)
	def(&o.Shards, 1)
	if o.DType == "" {
		o.DType = safetensors.BF16
	}
	if o.Metadata == nil {
		o.Metadata = map[string]string{"format": "pt"}
	}
	switch o.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
	default:
		return o, fmt.Errorf("synth: dtype %q: want BF16, F16 or F32", o.DType)
	}
	for _, v := range []int{o.Layers, o.HiddenSize, o.IntermediateSize, o.KVSize, o.VocabSize, o.Shards} {
		if v < 0 {
			return o, errors.New("synth: negative size in Options")
		}
	}
	if o.TPSize < 0 {
		return o, errors.New("synth: negative TPSize")
	}
	if o.TPSize > 0 {
		for _, v := range []int{o.HiddenSize, o.IntermediateSize, o.KVSize, o.VocabSize} {
			if v%o.TPSize != 0 {
				return o, fmt.Errorf("synth: size %d is not divisible by TPSize %d", v, o.TPSize)
			}
		}
	}
	return o, nil
}

// fileName names part (0-based) of rank.
func (o Options) fileName(rank, part int) string {
	switch {
	case o.TPSize > 0:
		return fmt.Sprintf("model-rank-%d-part-%d.safetensors", rank, part)
	case o.Shards == 1 && o.NoIndex:
		return "model.safetensors"
	}
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", part+1, o.Shards)
}

// spec is a tensor to generate.
type spec struct {
	name  string
	shape []uint64
}

// tensors lists one rank's tensors in model order; every rank has the same
// shapes, only the data differs.
func (o Options) tensors() []spec {
	tp := uint64(max(o.TPSize, 1))
	h, kv, inter, vocab := uint64(o.HiddenSize), uint64(o.KVSize), uint64(o.IntermediateSize), uint64(o.VocabSize)
	col := func(out, in uint64) []uint64 { return []uint64{out / tp, in} }
	row := func(out, in uint64) []uint64 { return []uint64{out, in / tp} }
	out := []spec{{"model.embed_tokens.weight", col(vocab, h)}}
	for i := range o.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		out = append(out,
			spec{p + "input_layernorm.weight", []uint64{h}},
			spec{p + "self_attn.q_proj.weight", col(h, h)},
			spec{p + "self_attn.k_proj.weight", col(kv, h)},
			spec{p + "self_attn.v_proj.weight", col(kv, h)},
			spec{p + "self_attn.o_proj.weight", row(h, h)},
			spec{p + "post_attention_layernorm.weight", []uint64{h}},
			spec{p + "mlp.gate_proj.weight", col(inter, h)},
			spec{p + "mlp.up_proj.weight", col(inter, h)},
			spec{p + "mlp.down_proj.weight", row(h, inter)},
		)
	}
	out = append(out, spec{"model.norm.weight", []uint64{h}})
	if !o.TiedEmbeddings {
		out = append(out, spec{"lm_head.weight", col(vocab, h)})
	}
	return out
}

// splitShards cuts specs, in order, into n non-empty groups of about equal
// element counts.
func splitShards(specs []spec, n int) ([][]spec, error) {
	if len(specs) < n {
		return nil, fmt.Errorf("synth: %d tensors cannot fill %d shards", len(specs), n)
	}
	elems := func(s spec) uint64 {
		e := uint64(1)
		for _, d := range s.shape {
			e *= d
		}
		return e
	}
	var total uint64
	for _, s := range specs {
		total += elems(s)
	}
	groups := make([][]spec, 1, n)
	var done uint64
	for i, s := range specs {
		cur := len(groups) - 1
		left := len(specs) - i // tensors not yet placed, s included
		after := n - 1 - cur   // shards after the current one
		full := done >= total/uint64(n)*uint64(cur+1)
		if len(groups[cur]) > 0 && after > 0 && (full || left == after) {
			groups = append(groups, nil)
			cur++
		}
		groups[cur] = append(groups[cur], s)
		done += elems(s)
	}
	return groups, nil
}

// writeGenerated writes one file of generated tensors and describes them.
func writeGenerated(path string, group []spec, o Options, rank int, buf []byte) ([]Tensor, error) {
	tensors := make([]safetensors.Tensor, len(group))
	for i, s := range group {
		tensors[i] = safetensors.Tensor{Name: s.name, DType: o.DType, Shape: s.shape}
	}
	prefix, infos, err := safetensors.EncodeHeader(tensors, o.Metadata)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	out := make([]Tensor, len(infos))
	err = func() error {
		if _, err := f.Write(prefix); err != nil {
			return err
		}
		for i, info := range infos {
			seed := TensorSeed(o.Seed, rank, info.Name)
			out[i] = Tensor{Name: info.Name, File: path, Rank: rank, DType: info.DType,
				Shape: info.Shape, Bytes: info.Len(), Seed: seed}
			stream := NewStream(seed)
			for left := info.Len(); left > 0; {
				chunk := buf[:min(left, uint64(len(buf)))]
				stream.Read(chunk)
				if _, err := f.Write(chunk); err != nil {
					return err
				}
				left -= uint64(len(chunk))
			}
		}
		return nil
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("synth: write %s: %w", path, err)
	}
	return out, nil
}

// writeIndex writes a model.safetensors.index.json as transformers does.
func writeIndex(path string, weightMap map[string]string, totalSize uint64) error {
	doc := struct {
		Metadata  map[string]uint64 `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]uint64{"total_size": totalSize}, weightMap}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: encode index: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}
