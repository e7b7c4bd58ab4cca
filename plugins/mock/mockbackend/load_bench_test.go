package mockbackend

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// BenchmarkLoadFreshMemory measures Load into a fresh allocation in
// /dev/shm (Allocate, Load, Free per iteration; a temporary folder where
// there is no /dev/shm) from a checkpoint of 256 MiB in the page cache:
// the fill rate a daemon start sees on the mock.
func BenchmarkLoadFreshMemory(b *testing.B) {
	const size = 256 << 20
	cfg := DefaultConfig()
	cfg.Memory = 2 * size
	cfg.Dir = filepath.Join(b.TempDir(), "shm")
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "wcache-mock-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(shm) })
		cfg.Dir = filepath.Join(shm, "shm")
	}
	be, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(data)
	path := filepath.Join(b.TempDir(), "w.safetensors")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetBytes(size)
	for b.Loop() {
		id, _, err := be.Allocate(ctx, 0, size)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Load(ctx, id, []sdk.Extent{{Path: path, Length: size}}, nil); err != nil {
			b.Fatal(err)
		}
		if err := be.Free(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}
