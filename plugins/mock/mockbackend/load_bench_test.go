package mockbackend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// BenchmarkLoadFreshMemory measures Load into a fresh allocation in
// /dev/shm (Allocate, Load, Free per iteration) from a checkpoint in the
// page cache: the fill rate a daemon start sees on the mock.
func BenchmarkLoadFreshMemory(b *testing.B) {
	const size = 256 << 20
	dir := filepath.Join("/dev/shm", fmt.Sprintf("wcache-mock-bench-%d", os.Getpid()))
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg := DefaultConfig()
	cfg.Memory = 2 * size
	cfg.Dir = dir
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
