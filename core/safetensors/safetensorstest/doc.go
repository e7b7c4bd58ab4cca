// Package safetensorstest builds safetensors files and whole checkpoints for
// tests and benchmarks of other packages.
//
// The writer (safetensors.Encode, safetensors.WriteFile) and the checkpoint
// generator (core/safetensors/synth) are product code; this package keeps
// short names for tests (WriteFile without metadata, GenerateCheckpoint)
// and adds what only tests need: RawFile builds arbitrary (also malformed)
// files byte by byte.
package safetensorstest
