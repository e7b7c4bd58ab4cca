package cudabackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// TestLoadThroughSmallStaging loads extents much larger than the staging
// buffers while the fake driver delays every asynchronous copy: a buffer
// refilled before its copy completed, a copy from the wrong offset of a
// buffer or a Load that returned before the stream drained would all show
// as differing bytes.
func TestLoadThroughSmallStaging(t *testing.T) {
	for _, tc := range []struct {
		buffers  int
		directIO bool
	}{{2, true}, {3, true}, {2, false}} {
		t.Run(fmt.Sprintf("buffers=%d/direct=%v", tc.buffers, tc.directIO), func(t *testing.T) {
			cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKECUDA_COPY_DELAY_US": "200"}})
			cfg.StagingBuffers = tc.buffers
			cfg.DirectIO = tc.directIO
			b := newBackend(t, cfg)
			ctx := context.Background()
			pathA, a := writeFile(t, 700_001, 3)
			pathB, bb := writeFile(t, 123_457, 4)
			extents := []sdk.Extent{
				{Path: pathA, FileOffset: 5, Length: 300_000, DestOffset: 3},
				// Adjacent in file and allocation: merged with the one above.
				{Path: pathA, FileOffset: 300_005, Length: 400_000 - 4, DestOffset: 300_003},
				{Path: pathB, FileOffset: 0, Length: uint64(len(bb)), DestOffset: 800_000},
				{Path: pathA, FileOffset: 4096, Length: 0, DestOffset: 0},
				{Path: pathB, FileOffset: 4095, Length: 8194, DestOffset: 1_000_000},
				{Path: pathA, FileOffset: 700_000, Length: 1, DestOffset: 1_100_000},
			}
			id, _, err := b.Allocate(ctx, 0, 1_200_000)
			if err != nil {
				t.Fatal(err)
			}
			var calls [][2]uint64
			if err := b.Load(ctx, id, extents, func(done, total uint64) { calls = append(calls, [2]uint64{done, total}) }); err != nil {
				t.Fatal(err)
			}
			want := map[int][]byte{0: a[5:300_005], 1: a[300_005:700_001], 2: bb, 4: bb[4095 : 4095+8194], 5: a[700_000:]}
			for i, w := range want {
				e := extents[i]
				got, err := b.Read(ctx, id, e.DestOffset, e.Length)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, w) {
					t.Fatalf("extent %d: bytes read back differ from the file", i)
				}
				sums, err := b.Digest(ctx, id, []sdk.Range{{Offset: e.DestOffset, Length: e.Length}})
				if err != nil || sums[0] != sha(w) {
					t.Fatalf("extent %d: Digest %x, %v", i, sums, err)
				}
			}
			var total uint64
			for _, e := range extents {
				total += e.Length
			}
			if len(calls) == 0 || calls[len(calls)-1] != [2]uint64{total, total} {
				t.Fatalf("progress calls %v: want them to end at (%d, %d)", calls, total, total)
			}
			for i := 1; i < len(calls); i++ {
				if calls[i][0] <= calls[i-1][0] || calls[i][1] != total {
					t.Fatalf("progress calls %v: not increasing", calls)
				}
			}
		})
	}
}

func TestLoadRejectsBadExtentsBeforeCopying(t *testing.T) {
	b := newBackend(t, fakeConfig(t, fakeOptions{}))
	ctx := context.Background()
	path, data := writeFile(t, 10_000, 5)
	id, _, err := b.Allocate(ctx, 0, 20_000)
	if err != nil {
		t.Fatal(err)
	}
	good := sdk.Extent{Path: path, Length: uint64(len(data))}
	for name, bad := range map[string]sdk.Extent{
		"past the file's end":       {Path: path, FileOffset: 9_000, Length: 1_001, DestOffset: 10_000},
		"past the allocation's end": {Path: path, Length: 10, DestOffset: 19_995},
		"missing file":              {Path: path + ".missing", Length: 1, DestOffset: 10_000},
		"file offset overflows":     {Path: path, FileOffset: 1 << 63, Length: 1 << 63, DestOffset: 10_000},
	} {
		err := b.Load(ctx, id, []sdk.Extent{good, bad}, nil)
		if !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("%s: Load = %v, want ErrInvalidArgument", name, err)
		}
	}
	got, err := b.Read(ctx, id, 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, len(data))) {
		t.Fatal("a Load refused for a bad extent copied the good one")
	}
}

func TestLoadCancelledLeavesBackendUsable(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKECUDA_COPY_DELAY_US": "100"}})
	b := newBackend(t, cfg)
	path, data := writeFile(t, 12<<20, 6)
	id, _, err := b.Allocate(context.Background(), 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ext := []sdk.Extent{{Path: path, Length: uint64(len(data))}}
	err = b.Load(ctx, id, ext, func(done, total uint64) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Load = %v, want context.Canceled", err)
	}
	if err := b.Load(context.Background(), id, ext, nil); err != nil {
		t.Fatalf("Load after a cancelled one: %v", err)
	}
	sums, err := b.Digest(context.Background(), id, []sdk.Range{{Length: uint64(len(data))}})
	if err != nil || sums[0] != sha(data) {
		t.Fatalf("Digest after reload: %v", err)
	}
}

func TestCloseDuringLoad(t *testing.T) {
	cfg := fakeConfig(t, fakeOptions{staging: 16 << 10, env: map[string]string{"FAKECUDA_COPY_DELAY_US": "100"}})
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	path, data := writeFile(t, 8<<20, 7)
	id, _, err := b.Allocate(context.Background(), 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		var once bool
		result <- b.Load(context.Background(), id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, func(done, total uint64) {
			if !once {
				once = true
				close(started)
			}
		})
	}()
	<-started
	if err := b.Close(); err != nil {
		t.Fatalf("Close during a Load: %v", err)
	}
	if err := <-result; !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Load interrupted by Close = %v, want ErrUnavailable", err)
	}
}
