// Package safetensorstest writes safetensors files and whole checkpoints for
// tests and benchmarks of other packages.
//
// WriteFile and Encode produce files laid out as the reference writer lays
// them out (tensors ordered by decreasing dtype alignment, then name; header
// padded with spaces to a multiple of 8). GenerateCheckpoint writes a
// llama-shaped checkpoint, sharded with a model.safetensors.index.json or
// pre-sharded per tensor-parallel rank, filled with deterministic
// pseudo-random bytes streamed to disk, so multi-GiB checkpoints cost no
// more memory than small ones. RawFile builds arbitrary (also malformed)
// files byte by byte.
package safetensorstest
