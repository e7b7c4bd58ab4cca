package daemon

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/sdk/mock"
)

// TestCheckpointChangedDuringLoadIsRefused: a shard swapped by a rename or
// written in place while the backend loads (the backend reads by path)
// makes the start fail with a *safetensors.ChangedError naming the file:
// what was loaded is not what the checkpoint digest describes.
func TestCheckpointChangedDuringLoadIsRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"swapped by rename", func(t *testing.T, path string) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)-1] ^= 0xff // same header, other weights
			if err := os.WriteFile(path+".new", data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"written in place", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			if _, err := f.WriteAt([]byte{0x5a}, st.Size()-1); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			victim := f.model.Files[0]
			// File times have the kernel's coarse granularity: make the
			// original's mtime unlike any a write during the test sets.
			hourAgo := time.Now().Add(-time.Hour)
			if err := os.Chtimes(victim, hourAgo, hourAgo); err != nil {
				t.Fatal(err)
			}
			changed := false
			p := f.plugin(func(b *mock.Backend) {
				load := b.LoadFunc
				b.LoadFunc = func(ctx context.Context, id sdk.AllocationID, ext []sdk.Extent, progress sdk.ProgressFunc) error {
					if !changed {
						changed = true
						c.change(t, victim)
					}
					return load(ctx, id, ext, progress)
				}
			})
			d, err := Start(context.Background(), p, f.options(0))
			var ce *safetensors.ChangedError
			if err == nil {
				d.Stop(context.Background(), true, 0)
				t.Fatal("the daemon started on a checkpoint changed during its load")
			}
			if !errors.As(err, &ce) || ce.Path != victim {
				t.Fatalf("start = %v, want a *safetensors.ChangedError naming %s", err, victim)
			}
			ps, err := f.layout.For(f.uuids[0])
			if err != nil {
				t.Fatal(err)
			}
			assertGone(t, ps.Socket, ps.Ready)
		})
	}
}

// TestVerifyLoad: with VerifyLoad a load whose memory matches the files
// serves; one whose memory differs from the files (here a byte flipped in
// the mock's memory after its Load) fails with ErrLoadMismatch naming the
// file, and nothing is served.
func TestVerifyLoad(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, func(o *Options) { o.VerifyLoad = true })
	if r.d.Info().Tensors == 0 {
		t.Fatal("no tensors")
	}

	g := newFixture(t)
	p := g.plugin(func(b *mock.Backend) {
		load := b.LoadFunc
		b.LoadFunc = func(ctx context.Context, id sdk.AllocationID, ext []sdk.Extent, progress sdk.ProgressFunc) error {
			if err := load(ctx, id, ext, progress); err != nil {
				return err
			}
			for _, shm := range backendtest.ShmFiles(t, g.shm) {
				fd, err := os.OpenFile(shm, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				one := []byte{0}
				fd.ReadAt(one, int64(ext[0].DestOffset))
				one[0] ^= 0xff
				fd.WriteAt(one, int64(ext[0].DestOffset))
				fd.Close()
			}
			return nil
		}
	})
	o := g.options(0)
	o.VerifyLoad = true
	d, err := Start(context.Background(), p, o)
	if err == nil {
		d.Stop(context.Background(), true, 0)
		t.Fatal("a load whose memory differs from the files was served")
	}
	if !errors.Is(err, ErrLoadMismatch) || !strings.Contains(err.Error(), g.model.Dir) {
		t.Fatalf("start = %v, want ErrLoadMismatch naming a checkpoint file", err)
	}
}
