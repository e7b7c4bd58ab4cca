// Package plan turns a safetensors checkpoint into a loading plan: a few
// large device allocations (arenas), the file extents that fill them, and
// the manifest entry of every tensor (which allocation, which offset).
//
// Why arenas: every exported allocation is one IPC handle a client must
// open, and opening a handle costs about a millisecond, so the number of
// allocations must not grow with the number of tensors. A plan has
// ceil(bytes / MaxArenaBytes) allocations, or a few more when files do not
// pack evenly.
//
// Placement rules:
//
//   - Each file's data region starts at a FileAlignment-aligned offset
//     (4096 by default; 2 MiB suits huge pages) and is loaded as ONE extent
//     when every tensor of the file is naturally aligned relative to the data
//     start (the reference writer guarantees this). Tensors keep their offset
//     relative to each other, so their device addresses are naturally
//     aligned too.
//   - A file whose tensors are not all naturally aligned is loaded tensor by
//     tensor, each tensor at a TensorAlignment-aligned (256-byte) offset.
//   - A file larger than MaxArenaBytes is cut at tensor boundaries into runs
//     that each fit an arena; each run is one extent, placed so that the
//     tensors keep their alignment modulo FileAlignment.
//   - A single tensor larger than MaxArenaBytes cannot be placed: that is a
//     *TooLargeError (raise MaxArenaBytes).
//
// BuildTable plans a tensor table instead of a checkpoint (a publish: the
// client holds the tensors and fills the arenas itself): the same arenas,
// each entry at a TensorAlignment boundary, entries that share a storage
// placed once.
//
// A plan holds only offsets and names: nothing proportional to the model's
// bytes.
package plan
