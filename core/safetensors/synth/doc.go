// Package synth writes synthetic llama-shaped safetensors checkpoints:
// sharded with a model.safetensors.index.json, or pre-sharded per
// tensor-parallel rank, filled with deterministic pseudo-random bytes
// streamed to disk, so multi-GiB checkpoints cost no more memory than small
// ones. wcache demo and the benchmarks run on them; tests reach them through
// core/safetensors/safetensorstest.
package synth
