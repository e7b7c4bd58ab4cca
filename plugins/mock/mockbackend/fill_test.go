package mockbackend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

func fileBytes(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}

func TestAllocateTakesNoMemoryUntilLoad(t *testing.T) {
	b := newTestBackend(t, nil)
	ctx := context.Background()
	id := allocate(t, b, 0, 64<<20)
	files := backendtest.ShmFiles(t, b.Dir())
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	if n := fileBytes(t, files[0]); n != 0 {
		t.Fatalf("a fresh allocation file holds %d bytes, want none (sparse)", n)
	}
	path, data := randomFile(t, 3<<20)
	if err := b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(len(data)), DestOffset: 1 << 20}}, nil); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if n := fileBytes(t, files[0]); n < 3<<20 || n > 5<<20 {
		t.Errorf("after loading 3 MiB the file holds %d bytes", n)
	}
	got, err := b.Read(ctx, id, 1<<20, uint64(len(data)))
	if err != nil || string(got) != string(data) {
		t.Fatalf("Read after Load: %v, equal %v", err, string(got) == string(data))
	}
	// Bytes never loaded read as zeros through the mapping.
	got, err = b.Read(ctx, id, 0, 4096)
	if err != nil || strings.Trim(string(got), "\x00") != "" {
		t.Fatalf("unloaded bytes: %v, %q", err, got[:16])
	}
}

func TestAllocateRefusesWhatTheFolderCannotHold(t *testing.T) {
	b := newTestBackend(t, func(c *Config) { c.Memory = 1 << 60 })
	ctx := context.Background()
	var st unix.Statfs_t
	if err := unix.Statfs(b.Dir(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks == 0 {
		t.Fatalf("the test folder %s reports no size limit; the check needs one", b.Dir())
	}
	avail := st.Bavail * uint64(st.Bsize)
	freeMemory := func() uint64 { return backendtest.FreeMemory(t, b, 0) }

	_, _, err := b.Allocate(ctx, 0, avail+1<<30)
	if !errors.Is(err, sdk.ErrOutOfMemory) || !strings.Contains(err.Error(), b.Dir()) {
		t.Fatalf("Allocate of more than the folder's free space = %v, want ErrOutOfMemory naming %s", err, b.Dir())
	}
	if got := freeMemory(); got != 1<<60 {
		t.Errorf("FreeMemory = %d after a refused Allocate, want it unchanged", got)
	}
	if files := backendtest.ShmFiles(t, b.Dir()); len(files) != 0 {
		t.Errorf("a refused Allocate left %v", files)
	}

	// Allocation files are sparse: the folder's free space does not see
	// them, so the backend counts what its own allocations still need.
	part := avail / 10 * 7
	first, _, err := b.Allocate(ctx, 0, part)
	if err != nil {
		t.Fatalf("Allocate of 70%% of the free space: %v", err)
	}
	_, _, err = b.Allocate(ctx, 1, part)
	if !errors.Is(err, sdk.ErrOutOfMemory) || !strings.Contains(err.Error(), "unfilled allocations") {
		t.Fatalf("second Allocate of 70%% of the free space = %v, want ErrOutOfMemory about unfilled allocations", err)
	}
	if err := b.Free(ctx, first); err != nil {
		t.Fatal(err)
	}
	second, _, err := b.Allocate(ctx, 1, part)
	if err != nil {
		t.Fatalf("Allocate after freeing the first: %v", err)
	}
	if err := b.Free(ctx, second); err != nil {
		t.Fatal(err)
	}
}

func TestLoadWithStatsCountsTheFill(t *testing.T) {
	b := newTestBackend(t, nil)
	ctx := context.Background()
	path, data := randomFile(t, 5*loadBuffer+17)
	id, _, err := b.Allocate(ctx, 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var sl sdk.StatsLoader = b
	st, err := sl.LoadWithStats(ctx, id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != uint64(len(data)) || st.Chunks != 6 || st.Readers < 1 || st.BufferedFiles+st.DirectFiles != 1 {
		t.Fatalf("stats %+v, want %d bytes in 6 chunks from one file", st, len(data))
	}
	if st.Read <= 0 || st.Queue <= 0 || st.Wall <= 0 {
		t.Fatalf("stats %+v: reading, copying (pwrite) and wall time must be measured", st)
	}
	got, err := b.Read(ctx, id, 0, uint64(len(data)))
	if err != nil || string(got) != string(data) {
		t.Fatalf("Read after Load: %v, equal %v", err, string(got) == string(data))
	}
}
