package fill

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
)

// A fill of a file's data region, cut into "tensors" laid out with padding
// in the destination, returns leaves from which the file's content digest
// follows by hashing only the header's leaf; every leaf it returns is the
// leaf's true SHA-256, whatever the readers, buffers and direct mode.
func TestFillDigestLeaves(t *testing.T) {
	const fileSize = 5<<20 + 4321
	const header = 10_000
	path, data := writeFile(t, fileSize, 3)
	want := filedigest.Bytes(data)
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 12 {
		opts := Options{Readers: 1 + iter%4, Buffers: 1 + iter%2, BufferBytes: Alignment * (1 + r.IntN(600)),
			Direct: []DirectMode{DirectNever, DirectAlways, DirectAuto}[iter%3]}
		var extents []sdk.Extent
		dest := uint64(0)
		for off := uint64(header); off < fileSize; {
			n := min(uint64(1+r.IntN(900_000)), fileSize-off)
			extents = append(extents, sdk.Extent{Path: path, FileOffset: off, Length: n, DestOffset: dest})
			off += n
			dest += n + uint64(r.IntN(3))*256 // padding: no merging
		}
		c := newFakeCopier(t, int(dest))
		st, err := Fill(context.Background(), c, dest, extents, nil, opts)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if len(st.Leaves) != 1 || st.Leaves[0].Path != path || st.Leaves[0].Size != fileSize || st.Leaves[0].Algorithm != filedigest.Default {
			t.Fatalf("iteration %d: leaves %+v", iter, st.Leaves)
		}
		leaves := st.Leaves[0].Leaves
		if n := filedigest.LeafCount(fileSize); int64(len(leaves)) != n-1 {
			t.Fatalf("iteration %d: %d leaves, want all %d but the header's", iter, len(leaves), n-1)
		}
		for _, l := range leaves {
			off, n := filedigest.LeafRange(fileSize, l.Index)
			if l.Sum != filedigest.Default.Leaf(data[off:off+n]) {
				t.Fatalf("iteration %d: leaf %d is wrong", iter, l.Index)
			}
		}
		got, err := filedigest.Complete(context.Background(), path, fileSize, leaves, filedigest.Options{})
		if err != nil || got != want {
			t.Fatalf("iteration %d: digest %s, %v; want %s", iter, got, err, want)
		}
	}
	// NoDigest: no leaves.
	c := newFakeCopier(t, 100)
	st, err := Fill(context.Background(), c, 100, []sdk.Extent{{Path: path, Length: 100}}, nil, Options{NoDigest: true})
	if err != nil || st.Leaves != nil {
		t.Fatalf("NoDigest fill: %v, leaves %+v", err, st.Leaves)
	}
	// A context that wants no digest (sdk.WithoutDigest): no leaves, no
	// hashing, the bytes copied.
	c = newFakeCopier(t, 100)
	st, err = Fill(sdk.WithoutDigest(context.Background()), c, 100, []sdk.Extent{{Path: path, Length: 100}}, nil, Options{})
	if err != nil || st.Leaves != nil || st.Hash != 0 || st.Bytes != 100 {
		t.Fatalf("fill without digest: %v, leaves %+v, hash %v, %d bytes", err, st.Leaves, st.Hash, st.Bytes)
	}
}
