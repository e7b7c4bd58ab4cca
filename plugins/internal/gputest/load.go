package gputest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

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
