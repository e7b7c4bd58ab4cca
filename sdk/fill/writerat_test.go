package fill

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// The host-memory copier writes every extent's bytes at its destination
// offset of a file, with several readers; a nil writer copies nothing; a
// failing WriteAt fails the fill with its error.
func TestWriterAtCopier(t *testing.T) {
	a, da := writeFile(t, 3<<20+17, 21)
	b, db := writeFile(t, 1<<20+5, 22)
	total := uint64(len(da) + len(db) + 4096)
	dst, err := os.Create(filepath.Join(t.TempDir(), "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	extents := []sdk.Extent{
		{Path: b, Length: uint64(len(db)), DestOffset: 0},
		{Path: a, Length: uint64(len(da)), DestOffset: uint64(len(db)) + 4096},
	}
	opts := Options{Readers: 3, BufferBytes: 256 << 10}
	st, err := Fill(context.Background(), WriterAt{W: dst}, total, extents, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkStats(t, st, uint64(len(da)+len(db)))
	got, err := os.ReadFile(dst.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(db)], db) || !bytes.Equal(got[len(db)+4096:], da) {
		t.Fatal("the destination file differs from the extents' bytes")
	}

	if _, err := Fill(context.Background(), WriterAt{}, total, extents, nil, opts); err != nil {
		t.Fatalf("a nil writer: %v", err)
	}

	boom := errors.New("device full")
	_, err = Fill(context.Background(), WriterAt{W: failingWriter{boom}}, total, extents, nil, opts)
	if !errors.Is(err, boom) {
		t.Fatalf("Fill with a failing writer = %v, want %v", err, boom)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) WriteAt([]byte, int64) (int, error) { return 0, w.err }
