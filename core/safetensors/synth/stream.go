package synth

import (
	"encoding/binary"
	"hash/fnv"
)

// Stream is an endless deterministic pseudo-random byte stream (xorshift64*
// seeded through splitmix64), cheap enough to fill GiB of tensor data. The
// bytes depend only on the seed, not on how reads are split.
type Stream struct {
	state   uint64
	pending [8]byte
	npend   int // bytes of pending not yet returned, at its end
}

// NewStream returns the stream of seed. Every seed, 0 included, is valid.
func NewStream(seed uint64) *Stream {
	s := splitmix64(seed)
	if s == 0 {
		s = 0x9e3779b97f4a7c15
	}
	return &Stream{state: s}
}

// next advances xorshift64*.
func (s *Stream) next() uint64 {
	x := s.state
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	s.state = x
	return x * 0x2545f4914f6cdd1d
}

// Read fills p entirely and never fails.
func (s *Stream) Read(p []byte) (int, error) {
	n := len(p)
	if s.npend > 0 {
		c := copy(p, s.pending[8-s.npend:])
		s.npend -= c
		p = p[c:]
	}
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, s.next())
		p = p[8:]
	}
	if len(p) > 0 {
		binary.LittleEndian.PutUint64(s.pending[:], s.next())
		c := copy(p, s.pending[:])
		s.npend = 8 - c
	}
	return n, nil
}

// splitmix64 is one step of SplitMix64, used to spread seeds.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// TensorSeed is the stream seed Generate uses for a tensor: a mix
// of the checkpoint seed, the tensor-parallel rank (0 when not pre-sharded)
// and the tensor name.
func TensorSeed(seed uint64, rank int, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix64(seed ^ splitmix64(uint64(rank)+1) ^ h.Sum64())
}

// StreamBytes returns the first n bytes of the stream of seed.
func StreamBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	NewStream(seed).Read(b)
	return b
}
