// Package staging plans and performs the file reads that fill the CUDA
// backend's pinned staging buffers.
//
// A file extent [offset, offset+length) is cut into chunks that each fit
// one staging buffer (Plan). When the file is opened with O_DIRECT, every
// read starts at an Alignment-aligned file offset, asks for an aligned
// length and lands at the start of an aligned buffer; the unaligned head
// (Chunk.Skip bytes) and the bytes past the extent's end are read too and
// simply not copied onwards. The head and tail therefore never need a
// second, buffered read, and nothing is moved in place inside a buffer
// (the class of bug behind fastsafetensors#38). When O_DIRECT is refused
// (EINVAL from open or from a read: tmpfs, some network filesystems, an
// unaligned buffer), File falls back to buffered pread of the same ranges.
package staging
