package readback

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/wcache/wcache/sdk"
)

func TestDigestOverChunks(t *testing.T) {
	mem := make([]byte, 3*Chunk+17)
	for i := range mem {
		mem[i] = byte(i * 31)
	}
	ranges := []sdk.Range{{Offset: 5, Length: 2*Chunk + 3}, {Offset: 0, Length: 0}, {Offset: uint64(len(mem)) - 9, Length: 9}}
	largest, err := CheckRanges(ranges, uint64(len(mem)))
	if err != nil {
		t.Fatal(err)
	}
	copies := 0
	sums, err := Digest(context.Background(), ranges, largest, func(buf []byte, off uint64) <-chan error {
		copies++
		ch := make(chan error, 1)
		copy(buf, mem[off:])
		ch <- nil
		return ch
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range ranges {
		if sums[i] != sha256.Sum256(mem[r.Offset:r.Offset+r.Length]) {
			t.Errorf("range %d: wrong digest", i)
		}
	}
	if copies != 4 {
		t.Errorf("%d copies, want 3 chunks for the first range and 1 for the last", copies)
	}
	if _, err := CheckRanges([]sdk.Range{{Offset: 10, Length: ^uint64(0)}}, 100); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("an overflowing range = %v, want ErrInvalidArgument", err)
	}
	if err := CheckRead(0, sdk.MaxReadBytes+1, ^uint64(0)); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("a read above MaxReadBytes = %v", err)
	}
}
