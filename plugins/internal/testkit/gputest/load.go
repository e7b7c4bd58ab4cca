package gputest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
)

// CheckLoadRejectsBadExtents loads a good extent with a bad one (past the
// file's end, past the allocation's end, a missing file, a file offset
// that overflows) into a fresh allocation of b: each Load must be
// ErrInvalidArgument and copy nothing, not even the good extent.
func CheckLoadRejectsBadExtents(t *testing.T, b sdk.Backend) {
	t.Helper()
	ctx := context.Background()
	path, data := WriteFile(t, 10_000, 5)
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

// CheckCloseDuringLoad starts a Load of 8 MiB into b, whose copies must
// be slow enough (a paced fake copy engine) for the Load to still run
// when Close is called after its first progress report: Close must
// succeed and the Load fail with ErrUnavailable.
func CheckCloseDuringLoad[B interface {
	sdk.Backend
	io.Closer
}](t *testing.T, b B) {
	t.Helper()
	path, data := WriteFile(t, 8<<20, 7)
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

// CheckLoadExtents loads six extents of two files into a 1,200,000-byte
// allocation on device ordinal of b (unaligned offsets, two adjacent
// extents that merge, an empty one, a one-byte tail) and checks the bytes
// read back and their digests against the files, and that progress
// increases to (total, total). Run it against staging buffers much smaller
// than the extents and a delayed copy engine: a buffer refilled before
// its copy completed, a copy from the wrong offset of a buffer or a Load
// that returned before the stream drained would all show as differing
// bytes.
func CheckLoadExtents(t *testing.T, b sdk.Backend, ordinal int) {
	t.Helper()
	ctx := context.Background()
	pathA, a := WriteFile(t, 700_001, 3)
	pathB, bb := WriteFile(t, 123_457, 4)
	extents := []sdk.Extent{
		{Path: pathA, FileOffset: 5, Length: 300_000, DestOffset: 3},
		// Adjacent in file and allocation: merged with the one above.
		{Path: pathA, FileOffset: 300_005, Length: 400_000 - 4, DestOffset: 300_003},
		{Path: pathB, FileOffset: 0, Length: uint64(len(bb)), DestOffset: 800_000},
		{Path: pathA, FileOffset: 4096, Length: 0, DestOffset: 0},
		{Path: pathB, FileOffset: 4095, Length: 8194, DestOffset: 1_000_000},
		{Path: pathA, FileOffset: 700_000, Length: 1, DestOffset: 1_100_000},
	}
	id, _, err := b.Allocate(ctx, ordinal, 1_200_000)
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
		if err != nil || sums[0] != sha256.Sum256(w) {
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
}

// CheckLanesLogNUMANode opens a backend with a debug logger (open: its
// configuration's sysfs says which NUMA node device 0 sits on), loads a
// file into device 0, closes the backend and checks that the log names
// want, the node its fill lanes were made for ("numa_node=0"; the
// placement itself is set_mempolicy, tested in plugins/internal/staging).
func CheckLanesLogNUMANode[B interface {
	sdk.Backend
	io.Closer
}](t *testing.T, open func(hclog.Logger) (B, error), want string) {
	t.Helper()
	var logs bytes.Buffer
	b, err := open(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}))
	if err != nil {
		t.Fatal(err)
	}
	path, data := WriteFile(t, 300_000, 10)
	id, _, err := b.Allocate(context.Background(), 0, uint64(len(data)))
	if err == nil {
		err = b.Load(context.Background(), id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil)
	}
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), want) {
		t.Errorf("logs lack %q:\n%s", want, logs.String())
	}
}
