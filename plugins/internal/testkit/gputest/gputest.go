// Package gputest holds what the GPU backends' tests share: deterministic
// checkpoint files, the importing process of the cross-process IPC tests,
// the paced-copy-engine check, the fill benchmark, and the checks every
// vendor's plugin process passes alike (Plugin, RunPlugin; the peer-copy
// checks and benchmark in peer.go). It is for tests only (it imports
// testing).
package gputest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk"
)

// WriteFile writes n deterministic pseudo-random bytes (xorshift from
// seed) to a new file under t.TempDir and returns its path and bytes.
func WriteFile(t testing.TB, n int, seed byte) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range data {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		data[i] = byte(x)
	}
	path := filepath.Join(t.TempDir(), "weights.safetensors")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// Environment of the importing process (RunImporter, ImporterMain).
const (
	envHandle = "WCACHE_GPUTEST_HANDLE"
	envSize   = "WCACHE_GPUTEST_SIZE"
	envRange  = "WCACHE_GPUTEST_RANGE"
)

// RunImporter re-runs the test binary (whose TestMain calls ImporterMain
// when marker=1 is set) as another process with env added: it imports h
// twice on ordinal 0, digests [dest, dest+n) through each id, frees both
// and prints the digest or the error, which RunImporter returns.
func RunImporter(t *testing.T, marker string, h sdk.Handle, dest, n int, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), marker+"=1",
		envHandle+"="+hex.EncodeToString(h.Data),
		fmt.Sprintf("%s=%d", envSize, h.Size),
		fmt.Sprintf("%s=%d:%d", envRange, dest, n)), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("importing process: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// ImporterMain is the importing process of RunImporter over the Backend
// newBackend opens (from the environment) and the handle kind; it returns
// the exit status.
func ImporterMain(kind string, newBackend func() (sdk.Backend, func() error, error)) int {
	say := func(format string, args ...any) int {
		fmt.Printf(format+"\n", args...)
		return 0
	}
	b, closeBackend, err := newBackend()
	if err != nil {
		return say("New: %v", err)
	}
	defer closeBackend()
	data, _ := hex.DecodeString(os.Getenv(envHandle))
	size, _ := strconv.ParseUint(os.Getenv(envSize), 10, 64)
	var off, n uint64
	fmt.Sscanf(os.Getenv(envRange), "%d:%d", &off, &n)
	ctx := context.Background()
	h := sdk.Handle{Kind: kind, Data: data, Size: size}
	first, err := b.Import(ctx, 0, h)
	if err != nil {
		return say("%v", err)
	}
	second, err := b.Import(ctx, 0, h)
	if err != nil {
		return say("second Import: %v", err)
	}
	if first == second {
		return say("second Import returned the same id")
	}
	var sums [2][32]byte
	for i, id := range []sdk.AllocationID{first, second} {
		s, err := b.Digest(ctx, id, []sdk.Range{{Offset: off, Length: n}})
		if err != nil {
			return say("Digest: %v", err)
		}
		sums[i] = s[0]
	}
	if sums[0] != sums[1] {
		return say("the two imports digest differently")
	}
	// One mapping per process: freeing one id keeps the other readable.
	if err := b.Free(ctx, first); err != nil {
		return say("Free: %v", err)
	}
	if _, err := b.Read(ctx, second, off, 1); err != nil {
		return say("Read after freeing the other import: %v", err)
	}
	if err := b.Free(ctx, second); err != nil {
		return say("Free: %v", err)
	}
	return say("%s", hex.EncodeToString(sums[0][:]))
}

// StatsBackend is a Backend whose Load returns the fill counters.
type StatsBackend interface {
	sdk.Backend
	sdk.StatsLoader
}

// The paced fill (CheckPacedFill, BenchPacedFill): PacedSize bytes read in
// PacedChunk-byte staging buffers by PacedReaders readers, without direct
// I/O, through a fake copy engine paced at PacedGBPS GB/s (the fake's
// <FAKE>_COPY_GBPS). A vendor's test opens its backend so.
const (
	PacedSize    = 48 << 20
	PacedChunk   = 2 << 20
	PacedReaders = 3
	PacedGBPS    = 0.25
)

// CheckPacedFill loads PacedSize bytes into device 0 of b, configured for
// the paced fill (see PacedSize), and checks what does not depend on the
// machine's load: the bytes are in place and the counters add up. How
// close the fill comes to the engine's time (reading overlapped with
// copying) is a figure for `make bench` (BenchPacedFill), logged here,
// never asserted. The first Load faults the fake's device memory in; the
// second is checked.
func CheckPacedFill(t *testing.T, b StatsBackend) {
	t.Helper()
	const size, chunk, readers, gbps = PacedSize, PacedChunk, PacedReaders, PacedGBPS
	ctx := context.Background()
	path, data := WriteFile(t, size, 8)
	id := LoadFile(t, b, path, size, size, 0)
	st, err := b.LoadWithStats(ctx, id, []sdk.Extent{{Path: path, Length: size}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	engine := time.Duration(float64(size) / (gbps * 1e9) * float64(time.Second))
	t.Logf("engine time %v, fill %+v (%.2f of the engine's rate; a figure, not a check)", engine, st, engine.Seconds()/st.Wall.Seconds())
	if st.Bytes != uint64(size) || st.Readers != readers || st.Chunks != uint64(size/chunk) {
		t.Errorf("stats %+v, want %d bytes in %d chunks by %d readers", st, size, size/chunk, readers)
	}
	sums, err := b.Digest(ctx, id, []sdk.Range{{Length: uint64(size)}})
	if err != nil || sums[0] != sha256.Sum256(data) {
		t.Fatalf("Digest after a paced load: %v", err)
	}
}

// BenchPacedFill measures Loads of PacedSize bytes into be, configured for
// the paced fill (see PacedSize), and reports engine_fraction: the
// engine's time for the bytes over the fill's wall time (1 when reading
// hides entirely behind the copies, lower when it does not).
func BenchPacedFill(b *testing.B, be StatsBackend) {
	const size, gbps = PacedSize, PacedGBPS
	ctx := context.Background()
	path, _ := WriteFile(b, size, 8)
	id := LoadFile(b, be, path, size, size, 0)
	ext := []sdk.Extent{{Path: path, Length: size}}
	engine := float64(size) / (gbps * 1e9)
	var wall time.Duration
	n := 0
	b.SetBytes(int64(size))
	for b.Loop() {
		st, err := be.LoadWithStats(ctx, id, ext, nil)
		if err != nil {
			b.Fatal(err)
		}
		wall += st.Wall
		n++
	}
	b.ReportMetric(engine*float64(n)/wall.Seconds(), "engine_fraction")
}

// BenchFill measures Loads of 64 MiB from the page cache into device 0 of
// a backend on the fakes (device memory already touched by a first Load)
// through the fake copy engine, unpaced (as fast as its stream threads
// copy): 4 MiB staging buffers, no direct I/O, no management library.
func (f Fakes[B]) BenchFill(b *testing.B) {
	s := staging.DefaultSettings()
	s.Bytes, s.DirectIO = 4<<20, false
	be := f.open(b, FakeOptions{NoManagement: true, Staging: s})
	const size = 64 << 20
	path, _ := WriteFile(b, size, 9)
	id := LoadFile(b, be, path, size, size, 0)
	ext := []sdk.Extent{{Path: path, Length: size}}
	ctx := context.Background()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		if err := be.Load(ctx, id, ext, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// ClearUserEnv unsets the WCACHE_* variables of the user running the
// tests (a library path, a staging size, a reader count …), which the
// backends read and the tests set themselves where they need them. Kept:
// the test-control variables (names with _TEST_, and WCACHE_CUDA_REAL /
// WCACHE_ROCM_REAL, which select the runs on real hardware). A TestMain
// calls it before anything else, outside its helper-process branch.
func ClearUserEnv() {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WCACHE_") && !strings.Contains(k, "_TEST_") && !strings.HasSuffix(k, "_REAL") {
			os.Unsetenv(k)
		}
	}
}
