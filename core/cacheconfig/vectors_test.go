package cacheconfig_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
)

// vectorsPath is shared with the Python client's tests.
const vectorsPath = "testdata/vectors.json"

// updateEnv regenerates vectorsPath when set to 1 (after a deliberate
// change of the encoding; the Python client must then agree).
const updateEnv = "WCACHE_UPDATE_VECTORS"

type vectorConfig struct {
	Name      string          `json:"name"`
	Config    json.RawMessage `json:"config"`
	Canonical string          `json:"canonical"`
	Digest    string          `json:"digest"`
}

type vectorHeader struct {
	Name      string `json:"name"`
	HeaderHex string `json:"header_hex"`
}

type vectorCheckpoint struct {
	Name   string         `json:"name"`
	Files  []vectorHeader `json:"files"`
	Digest string         `json:"digest"`
}

// vectorDir is a committed checkpoint directory (relative to the vectors
// file) and its checkpoint digest: files a third party digests as they are.
type vectorDir struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// hiddenDir holds two visible shards and two hidden files that must not
// count: a valid ".model-extra.safetensors" (it would change the digest)
// and a truncated ".partial.safetensors" (it would fail validation).
const hiddenDir = "testdata/checkpoint-with-hidden-files"

// writeHiddenDir (re)creates hiddenDir.
func writeHiddenDir(t *testing.T) {
	if err := os.RemoveAll(hiddenDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(hiddenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, tensors := range map[string][]safetensorstest.Tensor{
		"model-00001-of-00002.safetensors": {{Name: "a", DType: safetensors.BF16, Shape: []uint64{2, 2}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}},
		"model-00002-of-00002.safetensors": {{Name: "b", DType: safetensors.F32, Shape: []uint64{1}, Data: []byte{0, 0, 128, 63}}},
		".model-extra.safetensors":         {{Name: "c", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{9}}},
	} {
		if err := safetensorstest.WriteFileMetadata(filepath.Join(hiddenDir, name), tensors, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(hiddenDir, ".partial.safetensors"), []byte{0xff, 0xff}, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointDirVectors(t *testing.T) {
	vf := readVectors(t)
	if len(vf.CheckpointDirs) == 0 {
		t.Fatalf("no checkpoint_dirs vector; regenerate with %s=1", updateEnv)
	}
	for _, v := range vf.CheckpointDirs {
		got, err := cacheconfig.CheckpointDigestDir(filepath.Join(filepath.Dir(vectorsPath), v.Path))
		if err != nil || got != v.Digest {
			t.Errorf("%s: digest %s (%v), want %s", v.Path, got, err, v.Digest)
		}
	}
}

// vectorSpelling is one input of NormalizeDType or NormalizeQuantization
// and its canonical spelling.
type vectorSpelling struct {
	In        string `json:"in"`
	Canonical string `json:"canonical"`
}

type vectorFile struct {
	Comment        string             `json:"comment"`
	Configs        []vectorConfig     `json:"configs"`
	Checkpoints    []vectorCheckpoint `json:"checkpoints"`
	CheckpointDirs []vectorDir        `json:"checkpoint_dirs"`
	DTypes         []vectorSpelling   `json:"dtypes"`
	Quantizations  []vectorSpelling   `json:"quantizations"`
	Identities     []vectorIdentity   `json:"weights_identities"`
}

// vectorIdentity is a weights identity (WeightsIdentity) of one config for
// one kind; NoIdentity: the config has none (ErrNoWeightsIdentity) and
// Canonical and Identity are empty.
type vectorIdentity struct {
	Name       string          `json:"name"`
	Kind       string          `json:"kind"`
	Config     json.RawMessage `json:"config"`
	Canonical  string          `json:"canonical"`
	Identity   string          `json:"identity"`
	NoIdentity bool            `json:"no_identity,omitempty"`
}

// identityConfigs are the configurations the identity vectors cover: every
// config vector, and data-parallel replicas with and without experts
// sharded (two with the same identity, one without).
func identityConfigs() map[string]cacheconfig.Config {
	out := vectorConfigs()
	replica := cacheconfig.Default()
	replica.Model = "/models/moe"
	replica.CheckpointDigest = "sha256:" + strings.Repeat("ab", 32)
	replica.DType = "bfloat16"
	replica.DPSize, replica.DPRank = 4, 0
	out["dp-replica-rank-0"] = replica
	replica.DPRank, replica.DType = 3, "torch.bfloat16"
	out["dp-replica-rank-3"] = replica
	replica.EPSize, replica.EPRank = 4, 3
	out["dp-rank-3-experts-sharded"] = replica
	return out
}

func identityVectors() []vectorIdentity {
	configs := identityConfigs()
	var out []vectorIdentity
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		c := configs[name]
		for _, kind := range []cacheconfig.WeightsKind{cacheconfig.WeightsFromFiles, cacheconfig.WeightsPublished} {
			v := vectorIdentity{Name: name, Kind: string(kind), Config: configJSON(c)}
			canon, err := cacheconfig.WeightsIdentityCanonical(c, kind)
			id, _ := cacheconfig.WeightsIdentity(c, kind)
			v.Canonical, v.Identity, v.NoIdentity = canon, id, err != nil
			out = append(out, v)
		}
	}
	return out
}

func TestWeightsIdentityVectors(t *testing.T) {
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(b, &vf); err != nil {
		t.Fatal(err)
	}
	want := identityVectors()
	if len(vf.Identities) != len(want) {
		t.Fatalf("%d weights-identity vectors, want %d; regenerate with %s=1", len(vf.Identities), len(want), updateEnv)
	}
	ids := map[string]string{}
	for i, v := range vf.Identities {
		var p configv1.CacheConfig
		if err := protojson.Unmarshal(v.Config, &p); err != nil {
			t.Fatal(err)
		}
		c := cacheconfig.FromProto(&p)
		canon, err := cacheconfig.WeightsIdentityCanonical(c, cacheconfig.WeightsKind(v.Kind))
		if v.NoIdentity != errors.Is(err, cacheconfig.ErrNoWeightsIdentity) || canon != v.Canonical {
			t.Errorf("%s/%s: canonical %q (%v), vector %q (no_identity %v)", v.Name, v.Kind, canon, err, v.Canonical, v.NoIdentity)
		}
		if id, _ := cacheconfig.WeightsIdentity(c, cacheconfig.WeightsKind(v.Kind)); id != v.Identity {
			t.Errorf("%s/%s: identity %s, vector %s", v.Name, v.Kind, id, v.Identity)
		}
		if w := want[i]; w.Name != v.Name || w.Kind != v.Kind || w.Identity != v.Identity {
			t.Errorf("vector %d (%s/%s) is not the one made from the configuration", i, v.Name, v.Kind)
		}
		ids[v.Name+"/"+v.Kind] = v.Identity
	}
	if ids["dp-replica-rank-0/published"] != ids["dp-replica-rank-3/published"] ||
		ids["dp-replica-rank-3/published"] == ids["dp-rank-3-experts-sharded/published"] {
		t.Error("the vectors do not show the data-parallel rule")
	}
}

// dtypeInputs are the dtype spellings the vectors cover: every alias (the
// test checks that) plus case, "torch." and unknown spellings.
func dtypeInputs() []string {
	in := slices.Sorted(slices.Values(cacheconfig.DTypeAliasSpellings()))
	return append(in, "AUTO", "BFloat16", "torch.bfloat16", "torch.float16", "torch.half", "torch.float32",
		"torch.float8_e4m3fn", "torch.float8_e5m2", "FP8_E4M3", "int4", "fp8", "Ünï", " bf16")
}

// quantizationInputs: every alias plus other spellings.
func quantizationInputs() []string {
	in := slices.Sorted(slices.Values(cacheconfig.QuantizationAliasSpellings()))
	return append(in, "None", "NONE", "BNB", "fp8", "AWQ", "gptq_marlin", "compressed-tensors", "Ünï")
}

func spellings(inputs []string, normalize func(string) string) []vectorSpelling {
	out := make([]vectorSpelling, len(inputs))
	for i, s := range inputs {
		out[i] = vectorSpelling{In: s, Canonical: normalize(s)}
	}
	return out
}

// configJSON writes c with every proto field name, zero values included.
func configJSON(c cacheconfig.Config) json.RawMessage {
	extra := c.Extra
	if extra == nil {
		extra = map[string]string{}
	}
	doc := map[string]any{
		"model": c.Model, "checkpoint_digest": c.CheckpointDigest, "model_arch": c.ModelArch,
		"revision": c.Revision, "dtype": c.DType, "quantization": c.Quantization,
		"quantization_config_digest": c.QuantizationConfigDigest,
		"tp_size":                    c.TPSize, "tp_rank": c.TPRank, "pp_size": c.PPSize, "pp_rank": c.PPRank,
		"dp_size": c.DPSize, "dp_rank": c.DPRank, "ep_size": c.EPSize, "ep_rank": c.EPRank,
		"extra": extra, "engine_name": c.EngineName, "engine_version": c.EngineVersion,
		"device_capability": c.DeviceCapability, "protocol_version": c.ProtocolVersion,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		panic(err)
	}
	return bytes.TrimSpace(buf.Bytes())
}

// vectorConfigs are the configurations the vectors cover.
func vectorConfigs() map[string]cacheconfig.Config {
	def := cacheconfig.Default()
	def.Model = "meta-llama/Llama-3.1-8B-Instruct"
	full := cacheconfig.Config{
		Model:                    "/models/llama 3/ünïcode",
		CheckpointDigest:         "sha256:" + hex.EncodeToString(bytes.Repeat([]byte{0xab}, 32)),
		ModelArch:                "LlamaForCausalLM",
		Revision:                 "5206a32e0bd3067aef1ce90f5528ade7d866253f",
		DType:                    "bfloat16",
		Quantization:             "fp8",
		QuantizationConfigDigest: "sha256:0000000000000000000000000000000000000000000000000000000000000001",
		TPSize:                   8, TPRank: 3, PPSize: 2, PPRank: 1, DPSize: 4, DPRank: 2, EPSize: 16, EPRank: 15,
		Extra:            map[string]string{"enable_dp_attention": "true", "context_parallel_size": "2", "ключ": "значение"},
		EngineName:       "sglang",
		EngineVersion:    "0.5.2",
		DeviceCapability: "9.0",
		ProtocolVersion:  1,
	}
	maxed := cacheconfig.Config{
		Model: "12:ab3:xyz", ModelArch: ":", Revision: "0:", DType: "auto", Quantization: "none",
		TPSize: 4294967295, TPRank: 4294967294, PPSize: 4294967295, PPRank: 0,
		DPSize: 4294967295, DPRank: 10, EPSize: 4294967295, EPRank: 4294967294,
		ProtocolVersion: 4294967295, EngineName: "e\u00e9\U0001F600", Extra: map[string]string{"k": ""},
	}
	sorting := cacheconfig.Default()
	sorting.CheckpointDigest = "sha256:" + hex.EncodeToString(bytes.Repeat([]byte{0x01, 0x23}, 16))
	sorting.Extra = map[string]string{"Z": "upper", "a": "lower", "a.b": "dotted", "extra": "nested name", "é": "non-ASCII", "_": "underscore"}
	return map[string]cacheconfig.Config{
		"default-with-model":      def,
		"every-field-set":         full,
		"zero-values":             {},
		"max-integers-and-colons": maxed,
		"extra-key-order":         sorting,
	}
}

// vectorCheckpoints builds the checkpoints the vectors cover.
func vectorCheckpoints(t *testing.T) []vectorCheckpoint {
	dir := t.TempDir()
	sharded := filepath.Join(dir, "sharded")
	if _, err := safetensorstest.GenerateCheckpoint(sharded, safetensorstest.GenOptions{
		Layers: 1, HiddenSize: 8, VocabSize: 16, Shards: 2, Seed: 1,
	}); err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(dir, "single")
	if err := os.MkdirAll(single, 0o755); err != nil {
		t.Fatal(err)
	}
	err := safetensorstest.WriteFileMetadata(filepath.Join(single, "model.safetensors"), []safetensorstest.Tensor{
		{Name: "w", DType: safetensors.F32, Shape: []uint64{2}, Data: make([]byte, 8)},
		{Name: "ñ", DType: safetensors.U8, Shape: []uint64{1}, Data: []byte{1}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	var out []vectorCheckpoint
	for _, d := range []string{sharded, single} {
		ck, err := safetensors.OpenCheckpoint(d)
		if err != nil {
			t.Fatal(err)
		}
		v := vectorCheckpoint{Name: filepath.Base(d), Digest: cacheconfig.CheckpointDigest(ck)}
		for _, f := range ck.Files {
			v.Files = append(v.Files, vectorHeader{Name: filepath.Base(f.Path), HeaderHex: hex.EncodeToString(f.RawHeader)})
		}
		out = append(out, v)
	}
	return out
}

func TestVectors(t *testing.T) {
	if os.Getenv(updateEnv) == "1" {
		writeVectors(t)
	}
	vf := readVectors(t)
	want := vectorConfigs()
	if len(vf.Configs) != len(want) || len(vf.Checkpoints) != 2 {
		t.Fatalf("%d config and %d checkpoint vectors; regenerate with %s=1", len(vf.Configs), len(vf.Checkpoints), updateEnv)
	}
	protoNames := protoFieldNames()
	for _, v := range vf.Configs {
		t.Run(v.Name, func(t *testing.T) {
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(v.Config, &keys); err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, protoNames) {
				t.Fatalf("config keys %v, want exactly the proto field names %v", got, protoNames)
			}
			var p configv1.CacheConfig
			if err := protojson.Unmarshal(v.Config, &p); err != nil {
				t.Fatal(err)
			}
			c := cacheconfig.FromProto(&p)
			if got := c.Canonical(); got != v.Canonical {
				t.Fatalf("canonical\n got %q\nwant %q", got, v.Canonical)
			}
			if got := c.Digest(); got != v.Digest {
				t.Fatalf("digest %s, want %s", got, v.Digest)
			}
			if src, ok := want[v.Name]; !ok || src.Digest() != v.Digest {
				t.Fatalf("vector %q does not match the configuration it was made from", v.Name)
			}
		})
	}
	for _, v := range vf.Checkpoints {
		t.Run("checkpoint-"+v.Name, func(t *testing.T) {
			dir := t.TempDir()
			ck := &safetensors.Checkpoint{}
			for _, fh := range v.Files {
				header, err := hex.DecodeString(fh.HeaderHex)
				if err != nil {
					t.Fatal(err)
				}
				ck.Files = append(ck.Files, &safetensors.File{Path: "/anywhere/" + fh.Name, RawHeader: header})
				writeFromHeader(t, filepath.Join(dir, fh.Name), header)
			}
			if got := cacheconfig.CheckpointDigest(ck); got != v.Digest {
				t.Fatalf("digest of the vector headers %s, want %s", got, v.Digest)
			}
			got, err := cacheconfig.CheckpointDigestDir(dir)
			if err != nil || got != v.Digest {
				t.Fatalf("digest of files rebuilt from the headers %s (%v), want %s", got, err, v.Digest)
			}
		})
	}
}

func TestSpellingVectors(t *testing.T) {
	vf := readVectors(t)
	for _, tc := range []struct {
		name      string
		vectors   []vectorSpelling
		aliases   []string
		normalize func(string) string
	}{
		{"dtypes", vf.DTypes, cacheconfig.DTypeAliasSpellings(), cacheconfig.NormalizeDType},
		{"quantizations", vf.Quantizations, cacheconfig.QuantizationAliasSpellings(), cacheconfig.NormalizeQuantization},
	} {
		covered := map[string]bool{}
		for _, v := range tc.vectors {
			covered[v.In] = true
			if got := tc.normalize(v.In); got != v.Canonical {
				t.Errorf("%s: %q normalises to %q, the vector says %q", tc.name, v.In, got, v.Canonical)
			}
		}
		for _, a := range tc.aliases {
			if !covered[a] {
				t.Errorf("%s: alias %q has no vector; regenerate with %s=1", tc.name, a, updateEnv)
			}
		}
	}
}

// writeFromHeader writes a valid file with the given raw header and zero
// tensor bytes.
func writeFromHeader(t *testing.T, path string, header []byte) {
	t.Helper()
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(header, &entries); err != nil {
		t.Fatal(err)
	}
	var end uint64
	for name, raw := range entries {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Offsets [2]uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		end = max(end, e.Offsets[1])
	}
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	file = append(file, header...)
	file = append(file, make([]byte, end)...)
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
}

// protoFieldNames lists CacheConfig's proto field names, sorted.
func protoFieldNames() []string {
	fields := (&configv1.CacheConfig{}).ProtoReflect().Descriptor().Fields()
	names := make([]string, fields.Len())
	for i := range names {
		names[i] = string(fields.Get(i).Name())
	}
	slices.Sort(names)
	return names
}

// readVectors decodes vectorsPath; an unknown field (a vector this test
// does not check) fails the test.
func readVectors(t *testing.T) vectorFile {
	t.Helper()
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var vf vectorFile
	if err := dec.Decode(&vf); err != nil {
		t.Fatal(err)
	}
	return vf
}

// writeVectors regenerates vectorsPath.
func writeVectors(t *testing.T) {
	vf := vectorFile{
		Comment: "Shared test vectors for core/cacheconfig (Go) and the Python client. See docs/cacheconfig.md. " +
			"Regenerate with " + updateEnv + "=1 go test ./core/cacheconfig/ -run TestVectors.",
	}
	configs := vectorConfigs()
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		c := configs[name]
		vf.Configs = append(vf.Configs, vectorConfig{Name: name, Config: configJSON(c), Canonical: c.Canonical(), Digest: c.Digest()})
	}
	vf.Checkpoints = vectorCheckpoints(t)
	writeHiddenDir(t)
	hidden, err := cacheconfig.CheckpointDigestDir(hiddenDir)
	if err != nil {
		t.Fatal(err)
	}
	vf.CheckpointDirs = []vectorDir{{Path: strings.TrimPrefix(hiddenDir, "testdata/"), Digest: hidden}}
	vf.DTypes = spellings(dtypeInputs(), cacheconfig.NormalizeDType)
	vf.Quantizations = spellings(quantizationInputs(), cacheconfig.NormalizeQuantization)
	vf.Identities = identityVectors()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(vf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vectorsPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
