package fill

// Alignment is the file offset, length and buffer address alignment used
// for O_DIRECT reads: 4096 satisfies every logical block size up to 4 KiB.
const Alignment = 4096

// Chunk is one staging-buffer fill: read ReadLen bytes at file offset
// ReadOffset into the buffer's start, then copy buffer[Skip:Skip+Len] to
// offset Dest of the destination. A read may return fewer than ReadLen
// bytes at end of file; it must return at least Skip+Len.
type Chunk struct {
	ReadOffset uint64
	ReadLen    int
	Skip       int
	Len        int
	Dest       uint64
}

// Plan cuts the copy of file bytes [offset, offset+length) to dest into
// chunks for a staging buffer of bufSize bytes. align is 1 for exact
// (buffered) reads or Alignment for O_DIRECT reads; bufSize must be a
// positive multiple of align. Plan returns nil for length 0.
func Plan(offset, length, dest uint64, bufSize, align int) []Chunk {
	if length == 0 {
		return nil
	}
	if align < 1 || bufSize < align || bufSize%align != 0 {
		panic("staging.Plan: bufSize must be a positive multiple of align")
	}
	a := uint64(align)
	end := offset + length
	endUp := (end + a - 1) / a * a
	var out []Chunk
	for pos := offset; pos < end; {
		window := pos / a * a
		readLen := min(uint64(bufSize), endUp-window)
		useEnd := min(window+readLen, end)
		c := Chunk{
			ReadOffset: window,
			ReadLen:    int(readLen),
			Skip:       int(pos - window),
			Len:        int(useEnd - pos),
			Dest:       dest + (pos - offset),
		}
		out = append(out, c)
		pos = useEnd
	}
	return out
}
