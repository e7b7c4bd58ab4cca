// Package safetensors is a strict reader of the safetensors format and of
// sharded checkpoints (model.safetensors.index.json).
//
// The reader enforces every rule the Rust reference implementation
// (huggingface/safetensors) enforces when it opens a file, and refuses
// duplicate JSON keys explicitly, which the reference only documents: header
// size at most MaxHeaderSize, a header length that fits in the file, valid
// UTF-8, a JSON object that starts with '{', strictly typed tensor entries,
// known dtypes, checked size arithmetic, tensors laid out back to back from
// offset 0 with no overlap, alias or hole, a byte range equal to dtype × shape,
// and no trailing bytes after the last tensor.
//
// Parsing reads the 8-byte length prefix and the header only; tensor bytes are
// never read, and no allocation is sized by the header length before that
// length has been checked against the file size. Every violation is a
// *FormatError that wraps one of the Err* sentinels, so callers branch with
// errors.Is and report with errors.As. docs/protocol.md, "Checkpoint
// files", lists the rules.
package safetensors
