// Package fill is the fill pipeline every wcache backend shares: it reads
// checkpoint extents from files into the backend's staging buffers and
// hands each filled buffer to the backend's asynchronous copy, keeping the
// disk (or page cache) and the copy engine busy at the same time.
//
// The backend supplies a Copier: lanes of staging buffers (pinned host
// memory for a GPU) and a copy out of them that completes asynchronously
// (cuMemcpyHtoDAsync plus an event on CUDA; a plain pwrite or memcpy for
// the mock). Fill does the rest:
//
//   - Extents are validated (ErrInvalidArgument for one outside the
//     destination or its file), merged where contiguous in the same file
//     and in the destination, and cut into chunks of one buffer each.
//   - Options.Readers goroutines (default min(8, runtime.NumCPU())) take
//     chunks from one queue. Each is locked to its OS thread while it
//     holds a lane, so a lane may keep per-thread state (a current CUDA
//     context). Each reader cycles through its lane's ring of buffers:
//     wait until the buffer's previous copy completed, pread into it,
//     queue its copy.
//   - Each file is read with O_DIRECT when its pages are not resident in
//     the page cache (mincore on a sample of a mapping of the file) and
//     with buffered pread when they are. A read that O_DIRECT refuses
//     (EINVAL, EFAULT, EOPNOTSUPP) switches that file to buffered reads
//     for the rest of the fill and is retried.
//   - Progress is reported from the goroutine that called Fill; the first
//     error, ctx's end, or a Copier error stops the readers, and Fill
//     returns only after every queued copy has completed (a buffer may be
//     reused as soon as Fill returns).
//   - Counters (bytes, time reading, waiting for a free buffer, queueing
//     copies, waiting for the last copies) come back as sdk.LoadStats.
//
// Several Fills may run at once (one per arena of a model): each runs its
// own readers, and a Copier that limits the lanes it hands out (as the
// CUDA backend does, per device) bounds the total.
//
// See docs/writing-a-backend.md, "The fill pipeline", for a walk-through
// for backend authors.
package fill
