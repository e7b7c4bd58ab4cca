package gputest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// InProcess is a vendor backend as its package's tests open it in
// process: an sdk.Backend that reports fill statistics and is closed.
type InProcess interface {
	StatsBackend
	io.Closer
}

// Fatal is the fatal error the checks latch in a fake vendor library:
// its code and name, and the plugin's exit status for it.
type Fatal struct {
	Code   int
	Name   string
	Status int
}

// Fakes is a vendor backend package as its in-process tests see it: the
// backend opened on the fake libraries, with what the checks that are the
// same for every vendor (RunBackend) need to know of the fakes.
type Fakes[B InProcess] struct {
	// Open opens a backend on the fake libraries as o says; the caller
	// closes it.
	Open func(t testing.TB, o FakeOptions) (B, error)
	// Runtime is b's runtime: the plugin's exit-on-fatal loop over it
	// and its latched fatal error.
	Runtime func(b B) FatalRuntime
	// Prefix is the fake's variable prefix ("FAKECUDA_", "FAKEHIP_"),
	// Devices how many devices it has, Capacity each one's bytes.
	Prefix   string
	Devices  int
	Capacity uint64
	// HandleKind is the kind of the handles the backend exports; IPCOpen
	// the entry point the fake's "noipcopen" build lacks.
	HandleKind, IPCOpen string
	// InitError is an error code the fake's INIT_ERROR variable makes its
	// initialisation return, and InitErrorName what New's error then
	// says.
	InitError     int
	InitErrorName string
	// OutOfMemory is the vendor's name of its out-of-memory error, as a
	// failed Allocate names it; Fatal the fatal error the checks latch.
	OutOfMemory string
	Fatal       Fatal
}

// open opens a backend as o says, closed at the test's cleanup
// (backendtest.Open).
func (f Fakes[B]) open(t testing.TB, o FakeOptions) B {
	t.Helper()
	return backendtest.Open(t, func() (B, error) { return f.Open(t, o) })
}

// Paced opens a backend for the paced fill (CheckPacedFill,
// BenchPacedFill): the fake's copy engine paced at PacedGBPS, PacedChunk
// staging buffers, PacedReaders readers, no direct I/O.
func (f Fakes[B]) Paced(t testing.TB) B {
	s := staging.DefaultSettings()
	s.Bytes, s.Readers, s.DirectIO = PacedChunk, PacedReaders, false
	return f.open(t, FakeOptions{Staging: s, Env: map[string]string{f.Prefix + "COPY_GBPS": fmt.Sprint(PacedGBPS)}})
}

// RunBackend runs, as subtests, the in-process checks every GPU backend
// passes the same way on its fakes: a missing library, a missing entry
// point and a failing initialisation refused typed; Loads through small staging buffers
// and a delayed copy engine, bad extents, cancellation, Close during a
// Load, the paced fill, Loads sharing the lanes, out of memory, a closed
// backend, a fatal error ending the plugin (and none without one), and
// handles Import must refuse.
func RunBackend[B InProcess](t *testing.T, f Fakes[B]) {
	small := func(bytes, buffers int, direct bool) staging.Settings {
		s := staging.DefaultSettings()
		s.Bytes, s.Buffers, s.DirectIO = bytes, buffers, direct
		return s
	}
	t.Run("UnavailableLibrary", func(t *testing.T) { CheckUnavailableLibrary(t, f) })
	// Device 1: a reader whose thread lacks the device's context (or
	// hipSetDevice) would queue onto device 0's stream, which the fakes
	// refuse.
	for _, tc := range []struct {
		buffers int
		direct  bool
	}{{2, true}, {3, true}, {2, false}} {
		t.Run(fmt.Sprintf("LoadThroughSmallStaging/buffers=%d/direct=%v", tc.buffers, tc.direct), func(t *testing.T) {
			CheckLoadExtents(t, f.open(t, FakeOptions{Staging: small(16<<10, tc.buffers, tc.direct),
				Env: map[string]string{f.Prefix + "COPY_DELAY_US": "200"}}), 1)
		})
	}
	t.Run("LoadRejectsBadExtentsBeforeCopying", func(t *testing.T) {
		CheckLoadRejectsBadExtents(t, f.open(t, FakeOptions{}))
	})
	t.Run("LoadCancelledLeavesBackendUsable", func(t *testing.T) {
		CheckLoadCancelled(t, f.open(t, FakeOptions{Staging: small(16<<10, 2, true),
			Env: map[string]string{f.Prefix + "COPY_DELAY_US": "100"}}))
	})
	t.Run("CloseDuringLoad", func(t *testing.T) {
		CheckCloseDuringLoad(t, f.open(t, FakeOptions{Env: map[string]string{f.Prefix + "COPY_GBPS": "0.02"}}))
	})
	// How close the paced fill comes to the engine's time is a figure
	// (BenchPacedFill), not a check.
	t.Run("LoadThroughThePacedCopyEngine", func(t *testing.T) { CheckPacedFill(t, f.Paced(t)) })
	t.Run("LoadsOfSeveralAllocationsShareTheLanes", func(t *testing.T) {
		s := small(64<<10, 2, true)
		s.Readers = 2
		CheckLoadsShareTheLanes(t, f.open(t, FakeOptions{Staging: s,
			Env: map[string]string{f.Prefix + "COPY_GBPS": "2", f.Prefix + "COPY_DELAY_US": "50"}}))
	})
	t.Run("OutOfMemoryThenFreeMakesRoom", func(t *testing.T) {
		CheckOutOfMemoryThenFree(t, f.open(t, FakeOptions{}), f.Capacity, f.OutOfMemory)
	})
	t.Run("ClosedBackendIsUnavailable", func(t *testing.T) {
		CheckClosedIsUnavailable(t, func() (B, error) { return f.Open(t, FakeOptions{}) })
	})
	t.Run("FatalErrorExitsThePlugin", func(t *testing.T) {
		trigger := filepath.Join(t.TempDir(), "fatal")
		b := f.open(t, FakeOptions{Env: map[string]string{f.Prefix + "STICKY_FILE": trigger}})
		CheckFatalErrorExits(t, b, f.Runtime(b).ExitOnFatal, trigger, f.Fatal.Code, f.Fatal.Name, f.Fatal.Status)
		if err := f.Runtime(b).FatalError(); err == nil {
			t.Fatal("FatalError = nil after a fatal error")
		}
	})
	t.Run("NoExitWithoutFatalError", func(t *testing.T) {
		b := f.open(t, FakeOptions{})
		CheckNoExitWithoutFatalError(t, b, f.Runtime(b).ExitOnFatal, f.Capacity)
	})
	t.Run("ImportRejectsBadHandles", func(t *testing.T) {
		CheckImportRejectsBadHandles(t, f.open(t, FakeOptions{}), f.HandleKind,
			sdk.Handle{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 10}, f.Devices)
	})
}

// CheckUnavailableLibrary opens the backend with a vendor library that
// cannot be used: a missing file, the fake's build without IPCOpen, and
// the fake failing its initialisation with InitError. Each open fails
// with ErrUnavailable saying why (the library, the missing symbol,
// InitErrorName); the first two are a *dl.LoadError.
func CheckUnavailableLibrary[B InProcess](t *testing.T, f Fakes[B]) {
	missing := filepath.Join(t.TempDir(), "missing", "lib.so")
	for name, tc := range map[string]struct {
		o        FakeOptions
		want     string
		loadFail bool
	}{
		"missing library": {FakeOptions{Library: missing}, "backend unavailable: cannot load " + missing + ": ", true},
		"missing symbol":  {FakeOptions{Variant: "noipcopen"}, ": missing symbol " + f.IPCOpen, true},
		"init failure":    {FakeOptions{Env: map[string]string{f.Prefix + "INIT_ERROR": fmt.Sprint(f.InitError)}}, f.InitErrorName, false},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := f.Open(t, tc.o)
			if err == nil {
				b.Close()
			}
			if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open = %v, want ErrUnavailable saying %q", err, tc.want)
			}
			var le *dl.LoadError
			if errors.As(err, &le) != tc.loadFail {
				t.Errorf("open = %v: a *dl.LoadError is %v, want %v", err, !tc.loadFail, tc.loadFail)
			}
		})
	}
}

// CheckLoadCancelled cancels a Load of 12 MiB into b at its first
// progress report (b's copies slow enough for it to still run then): the
// Load fails with context.Canceled, and a Load of the same file
// afterwards succeeds with the file's bytes.
func CheckLoadCancelled(t *testing.T, b sdk.Backend) {
	t.Helper()
	path, data := WriteFile(t, 12<<20, 6)
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
	if err != nil || sums[0] != sha256.Sum256(data) {
		t.Fatalf("Digest after reload: %v", err)
	}
}

// CheckLoadsShareTheLanes runs Loads into four allocations of b at once,
// b having fewer fill lanes than Loads × readers, and checks every
// allocation holds the file.
func CheckLoadsShareTheLanes(t *testing.T, b sdk.Backend) {
	t.Helper()
	ctx := context.Background()
	path, data := WriteFile(t, 3<<20+77, 9)
	ids := make([]sdk.AllocationID, 4)
	for i := range ids {
		id, _, err := b.Allocate(ctx, 0, uint64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errs <- b.Load(ctx, id, []sdk.Extent{{Path: path, Length: uint64(len(data))}}, nil) }()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		sums, err := b.Digest(ctx, id, []sdk.Range{{Length: uint64(len(data))}})
		if err != nil || sums[0] != sha256.Sum256(data) {
			t.Fatalf("allocation %d: Digest %v", i, err)
		}
	}
}
