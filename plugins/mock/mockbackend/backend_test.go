package mockbackend

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/sdk/names"
)

// loadBuffer is the chunk of a load: the unit of progress and of the load
// fault knobs.
const loadBuffer = mock.LoadChunk

func newTestBackend(t *testing.T, mutate func(*Config)) *Backend {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Memory = 256 << 20
	cfg.Dir = filepath.Join(t.TempDir(), "shm")
	// These tests are about the posix-shm files; memfd_test.go covers the
	// default kind.
	cfg.Handle = names.KindPosixShm
	if mutate != nil {
		mutate(&cfg)
	}
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func randomFile(t *testing.T, size int) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{byte(size)}).Read(data)
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// allocate allocates n bytes on device ordinal of b; a failure ends the
// test.
func allocate(t *testing.T, b *Backend, ordinal int, n uint64) sdk.AllocationID {
	t.Helper()
	id, _, err := b.Allocate(context.Background(), ordinal, n)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestAllocationFilesArePrivateAndRemoved(t *testing.T) {
	b := newTestBackend(t, nil)
	ctx := context.Background()
	id, size, err := b.Allocate(ctx, 1, 10_000)
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if size != 12288 {
		t.Errorf("reserved %d bytes for 10000, want the page-rounded 12288", size)
	}
	files := backendtest.ShmFiles(t, b.Dir())
	if len(files) != 1 {
		t.Fatalf("files after Allocate: %v", files)
	}
	fi, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != int64(size) {
		t.Errorf("allocation file mode %v size %d, want 0600 and %d", fi.Mode(), fi.Size(), size)
	}
	if !strings.HasPrefix(filepath.Base(files[0]), strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("file %s does not start with our pid", files[0])
	}
	dirInfo, err := os.Stat(b.Dir())
	if err != nil || dirInfo.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %v, %v; want 0700", dirInfo.Mode(), err)
	}
	if err := b.Free(ctx, id); err != nil {
		t.Fatalf("Free: %v", err)
	}
	if files := backendtest.ShmFiles(t, b.Dir()); len(files) != 0 {
		t.Fatalf("files after Free: %v", files)
	}
	for range 3 {
		if _, _, err := b.Allocate(ctx, 0, 4096); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if files := backendtest.ShmFiles(t, b.Dir()); len(files) != 0 {
		t.Fatalf("files after Close: %v", files)
	}
	if _, _, err := b.Allocate(ctx, 0, 4096); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Allocate after Close = %v, want ErrUnavailable", err)
	}
}

func TestRefusesAFolderOthersCanUse(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, link, "relative/dir"} {
		cfg := DefaultConfig()
		cfg.Handle = names.KindPosixShm
		cfg.Dir = dir
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("New accepted folder %s", dir)
		}
	}
}

func TestStaleFilesOfDeadProcessesAreRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shm")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	backendtest.CheckRemovesStaleShmFiles(t, dir, func() { newTestBackend(t, func(c *Config) { c.Dir = dir }) })
}

func TestExportedFileIsTheMemory(t *testing.T) {
	b := newTestBackend(t, nil)
	ctx := context.Background()
	path, data := randomFile(t, 100_003)
	id, size, err := b.Allocate(ctx, 0, 200_000)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Load(ctx, id, []sdk.Extent{{Path: path, FileOffset: 3, Length: 100_000, DestOffset: 77}}, nil); err != nil {
		t.Fatalf("Load: %v", err)
	}
	h, err := b.Export(ctx, id)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	shm := string(h.Data)
	if h.Kind != names.KindPosixShm || h.Size != size || filepath.Dir(shm) != b.Dir() {
		t.Fatalf("handle = %+v (path %s), want posix-shm of %d bytes in %s", h, shm, size, b.Dir())
	}
	// What a client does: map the file read-only and use the bytes in place.
	f, err := os.Open(shm)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, int(h.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if !bytes.Equal(m[77:100_077], data[3:100_003]) {
		t.Fatal("the mapped handle does not hold the loaded bytes")
	}
}

func TestImportAcceptsOnlyAllocationFilesOfItsFolder(t *testing.T) {
	b := newTestBackend(t, nil)
	ctx := context.Background()
	_, size, _, h := exportLoaded(t, b, 4096)
	good := string(h.Data)
	link := filepath.Join(b.Dir(), "1-0123456789abcdef-99.shm")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), filepath.Base(good))
	if err := os.WriteFile(elsewhere, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := []sdk.Handle{
		{Kind: names.KindPosixShm, Data: []byte(link), Size: size},
		{Kind: names.KindPosixShm, Data: []byte(elsewhere), Size: size},
		{Kind: names.KindPosixShm, Data: []byte(good), Size: size + 4096},
		{Kind: names.KindPosixShm, Data: []byte(good), Size: 0},
		{Kind: names.KindPosixShm, Data: []byte(filepath.Base(good)), Size: size},
		{Kind: names.KindPosixShm, Data: []byte(b.Dir() + "/../" + filepath.Base(b.Dir()) + "/" + filepath.Base(good)), Size: size},
	}
	for _, h := range bad {
		if _, err := b.Import(ctx, 0, h); !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("Import(%q, size %d) = %v, want ErrInvalidArgument", h.Data, h.Size, err)
		}
	}
	if _, err := b.Import(ctx, 0, sdk.Handle{Kind: "cuda-ipc", Data: make([]byte, 64), Size: size}); !errors.Is(err, sdk.ErrUnsupported) {
		t.Errorf("Import of a cuda-ipc handle = %v, want ErrUnsupported", err)
	}
}

func TestImportedMappingIsReadOnlyAndNotCharged(t *testing.T) {
	b := newTestBackend(t, nil)
	ctx := context.Background()
	id, size, _, h := exportLoaded(t, b, 8192)
	free := func() uint64 { return backendtest.FreeMemory(t, b, 0) }
	before := free()
	if before != b.cfg.Memory-size {
		t.Errorf("FreeMemory = %d after allocating %d of %d", before, size, b.cfg.Memory)
	}
	imp, err := b.Import(ctx, 0, h)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if free() != before {
		t.Errorf("Import changed FreeMemory from %d to %d", before, free())
	}
	path, _ := randomFile(t, 100)
	if err := b.Load(ctx, imp, []sdk.Extent{{Path: path, Length: 100}}, nil); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("Load into an imported mapping = %v, want ErrInvalidArgument", err)
	}
	if _, err := b.Export(ctx, imp); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("Export of an imported mapping = %v, want ErrInvalidArgument", err)
	}
	if err := b.Free(ctx, imp); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(string(h.Data)); err != nil {
		t.Errorf("freeing the import removed the exporter's file: %v", err)
	}
	if err := b.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
	if free() != b.cfg.Memory {
		t.Errorf("FreeMemory = %d after freeing everything, want %d", free(), b.cfg.Memory)
	}
}

func TestLargeLoadIsChunkedWithProgress(t *testing.T) {
	b := newTestBackend(t, nil)
	ctx := context.Background()
	path, data := randomFile(t, 3*loadBuffer+12345)
	id := allocate(t, b, 0, 5*loadBuffer)
	extents := []sdk.Extent{
		{Path: path, FileOffset: 0, Length: uint64(len(data)), DestOffset: 1},
		{Path: path, FileOffset: 11, Length: loadBuffer + 5, DestOffset: 3*loadBuffer + 20000},
	}
	var calls [][2]uint64
	total := extents[0].Length + extents[1].Length
	if err := b.Load(ctx, id, extents, func(d, tot uint64) { calls = append(calls, [2]uint64{d, tot}) }); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(calls) < 5 || calls[len(calls)-1] != [2]uint64{total, total} {
		t.Fatalf("progress calls %v, want one per chunk ending at %d", calls, total)
	}
	sums, err := b.Digest(ctx, id, []sdk.Range{{Offset: 1, Length: uint64(len(data))}, {Offset: 3*loadBuffer + 20000, Length: loadBuffer + 5}})
	if err != nil {
		t.Fatal(err)
	}
	if sums[0] != sha256.Sum256(data) || sums[1] != sha256.Sum256(data[11:11+loadBuffer+5]) {
		t.Fatal("loaded bytes differ from the file")
	}
}

func TestFaultFailAllocate(t *testing.T) {
	b := newTestBackend(t, func(c *Config) { c.Faults.FailAllocate = true })
	_, _, err := b.Allocate(context.Background(), 0, 4096)
	if !errors.Is(err, sdk.ErrOutOfMemory) || !strings.Contains(err.Error(), EnvFailAllocate) {
		t.Fatalf("Allocate = %v, want an injected ErrOutOfMemory naming %s", err, EnvFailAllocate)
	}
}

func TestFaultFailLoadAfter(t *testing.T) {
	b := newTestBackend(t, func(c *Config) { c.Faults.FailLoadAfter = 2 * loadBuffer })
	ctx := context.Background()
	path, data := randomFile(t, 4*loadBuffer)
	id, _, err := b.Allocate(ctx, 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	err = b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, func(d, _ uint64) { last = d })
	if err == nil || !strings.Contains(err.Error(), EnvFailLoadAfter) {
		t.Fatalf("Load = %v, want the injected failure", err)
	}
	if last < 2*loadBuffer {
		t.Errorf("failed after %d bytes, want at least %d", last, 2*loadBuffer)
	}
	// The backend stays usable.
	if _, err := b.Digest(ctx, id, []sdk.Range{{Offset: 0, Length: 10}}); err != nil {
		t.Fatalf("Digest after the injected failure: %v", err)
	}
	if err := b.Free(ctx, id); err != nil {
		t.Fatal(err)
	}
}

func TestFaultCrashLoadAfter(t *testing.T) {
	for _, after := range []int64{0, loadBuffer} {
		b := newTestBackend(t, func(c *Config) { c.Faults.CrashLoadAfter = after })
		var codes []int
		b.exit = func(code int) { codes = append(codes, code) }
		path, data := randomFile(t, 2*loadBuffer)
		id, _, err := b.Allocate(context.Background(), 0, uint64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Load(context.Background(), id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil)
		if len(codes) == 0 || codes[0] != CrashExitCode {
			t.Fatalf("after=%d: exit calls %v, want exit(%d)", after, codes, CrashExitCode)
		}
	}
}

func TestFaultFailExport(t *testing.T) {
	b := newTestBackend(t, func(c *Config) { c.Faults.FailExport = true })
	id := allocate(t, b, 0, 4096)
	if _, err := b.Export(context.Background(), id); err == nil || !strings.Contains(err.Error(), EnvFailExport) {
		t.Fatalf("Export = %v, want the injected failure", err)
	}
}

func TestLoadDelayEndsWithTheCaller(t *testing.T) {
	b := newTestBackend(t, func(c *Config) { c.Faults.LoadDelay = time.Hour })
	path, _ := randomFile(t, 10)
	id := allocate(t, b, 0, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := b.Load(ctx, id, []sdk.Extent{{Path: path, Length: 10}}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delayed Load = %v, want DeadlineExceeded (the context's, not the delay's end)", err)
	}
}

func TestCloseStopsARunningLoad(t *testing.T) {
	b := newTestBackend(t, func(c *Config) { c.Faults.LoadDelay = time.Hour })
	path, _ := randomFile(t, 10)
	id := allocate(t, b, 0, 4096)
	var wg sync.WaitGroup
	var loadErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		loadErr = b.Load(context.Background(), id, []sdk.Extent{{Path: path, Length: 10}}, nil)
	}()
	// Close may run before or during the Load; either way Load must end
	// with ErrUnavailable and Close must remove the file.
	time.Sleep(10 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	if !errors.Is(loadErr, sdk.ErrUnavailable) {
		t.Fatalf("Load during Close = %v, want ErrUnavailable", loadErr)
	}
	if files := backendtest.ShmFiles(t, b.Dir()); len(files) != 0 {
		t.Fatalf("files after Close: %v", files)
	}
}

func TestNewRefusesUnknownFaultDevice(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "shm")
	for _, o := range []int{-1, len(cfg.DeviceUUIDs)} {
		cfg.Faults.Devices = []int{0, o}
		if b, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "fault device ordinal") {
			if b != nil {
				_ = b.Close()
			}
			t.Errorf("fault device %d: err = %v, want a refusal", o, err)
		}
	}
}

// loadOn allocates on device ordinal and loads path (length bytes) into
// it with ctx, returning the allocation and Load's error.
func loadOn(t *testing.T, ctx context.Context, b *Backend, ordinal int, path string, length int) (sdk.AllocationID, error) {
	t.Helper()
	id, _, err := b.Allocate(context.Background(), ordinal, uint64(length))
	if err != nil {
		t.Fatalf("Allocate on device %d: %v", ordinal, err)
	}
	return id, b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(length)}}, nil)
}

func TestFaultDevicesTargetOneDevice(t *testing.T) {
	ctx := context.Background()
	path, data := randomFile(t, 3*loadBuffer/2)
	onDevice1 := func(f Faults) func(*Config) {
		return func(c *Config) {
			f.Devices = []int{1}
			c.Faults = f
		}
	}

	t.Run("allocate", func(t *testing.T) {
		f := NoFaults()
		f.FailAllocate = true
		b := newTestBackend(t, onDevice1(f))
		if _, _, err := b.Allocate(ctx, 0, 4096); err != nil {
			t.Errorf("Allocate on the untargeted device 0: %v", err)
		}
		if _, _, err := b.Allocate(ctx, 1, 4096); !errors.Is(err, sdk.ErrOutOfMemory) || !strings.Contains(err.Error(), EnvFailAllocate) {
			t.Errorf("Allocate on the targeted device 1 = %v, want the injected ErrOutOfMemory", err)
		}
	})

	t.Run("fail load", func(t *testing.T) {
		f := NoFaults()
		f.FailLoadAfter = 0
		b := newTestBackend(t, onDevice1(f))
		id, err := loadOn(t, ctx, b, 0, path, len(data))
		if err != nil {
			t.Fatalf("Load on the untargeted device 0: %v", err)
		}
		sums, err := b.Digest(ctx, id, []sdk.Range{{Length: uint64(len(data))}})
		if err != nil || sums[0] != sha256.Sum256(data) {
			t.Fatalf("device 0 holds other bytes than the file (%v)", err)
		}
		if _, err := loadOn(t, ctx, b, 1, path, len(data)); err == nil || !strings.Contains(err.Error(), EnvFailLoadAfter) {
			t.Fatalf("Load on the targeted device 1 = %v, want the injected failure", err)
		}
	})

	t.Run("crash load", func(t *testing.T) {
		f := NoFaults()
		f.CrashLoadAfter = 0
		b := newTestBackend(t, onDevice1(f))
		var codes []int
		b.exit = func(code int) { codes = append(codes, code) }
		if _, err := loadOn(t, ctx, b, 0, path, len(data)); err != nil || len(codes) != 0 {
			t.Fatalf("Load on the untargeted device 0: %v, exit calls %v", err, codes)
		}
		_, _ = loadOn(t, ctx, b, 1, path, len(data))
		if len(codes) == 0 || codes[0] != CrashExitCode {
			t.Fatalf("Load on the targeted device 1: exit calls %v, want exit(%d)", codes, CrashExitCode)
		}
	})

	t.Run("export", func(t *testing.T) {
		f := NoFaults()
		f.FailExport = true
		b := newTestBackend(t, onDevice1(f))
		id0, _, err := b.Allocate(ctx, 0, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := b.Export(ctx, id0); err != nil || h.Kind != names.KindPosixShm {
			t.Errorf("Export on the untargeted device 0 = %+v, %v", h, err)
		}
		id1, _, err := b.Allocate(ctx, 1, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Export(ctx, id1); err == nil || !strings.Contains(err.Error(), EnvFailExport) {
			t.Errorf("Export on the targeted device 1 = %v, want the injected failure", err)
		}
	})

	t.Run("load delay", func(t *testing.T) {
		f := NoFaults()
		f.LoadDelay = time.Hour
		b := newTestBackend(t, onDevice1(f))
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := loadOn(t, short, b, 0, path, len(data)); err != nil {
			t.Fatalf("Load on the untargeted device 0 was delayed: %v", err)
		}
		shorter, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel2()
		if _, err := loadOn(t, shorter, b, 1, path, len(data)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Load on the targeted device 1 = %v, want it delayed past the deadline", err)
		}
	})
}
