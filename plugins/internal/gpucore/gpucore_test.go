package gpucore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// fakeRuntime is a vendor runtime over the fake driver, as the CUDA and
// ROCm runtimes are over theirs.
type fakeRuntime struct {
	core    *gpucore.Runtime
	drv     *fakeDriver
	monitor map[int][2]uint64 // MonitorMemory's free and total by ordinal
}

func (r *fakeRuntime) Core() *gpucore.Runtime { return r.core }
func (r *fakeRuntime) Close() error           { return r.core.Close() }
func (r *fakeRuntime) Info() sdk.Info {
	return sdk.Info{Name: "fake", Version: "0", Platform: "fake", HandleKinds: []string{fakeKind}}
}

func (r *fakeRuntime) DeviceTable() []sdk.Device {
	out := make([]sdk.Device, r.drv.devices)
	for i := range out {
		out[i] = sdk.Device{Ordinal: i, UUID: fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i), Name: "fake", TotalMemory: r.drv.capacity}
	}
	return out
}

// MonitorMemory reports the monitor figures a test set for an ordinal.
func (r *fakeRuntime) MonitorMemory(ordinal int) (free, total uint64, ok bool) {
	m, ok := r.monitor[ordinal]
	return m[0], m[1], ok
}

// fakeBackend is the vendor backend of the fake runtime.
type fakeBackend = gpucore.Vendor[*fakeRuntime]

// newFake returns a backend of a fresh fake process on sp that owns its
// runtime; Close is the test's cleanup.
func newFake(t *testing.T, sp *space) *fakeBackend {
	t.Helper()
	return newFakeBackendOver(t, newFakeDriver(sp, 2, 64<<20))
}

// newFakeBackendOver returns a backend that owns a new runtime over an
// existing fake process's driver.
func newFakeBackendOver(t *testing.T, drv *fakeDriver) *fakeBackend {
	t.Helper()
	b, err := gpucore.Own(&fakeRuntime{core: gpucore.NewRuntime(drv, nil), drv: drv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	sp := newSpace() // instances are processes on one machine's devices
	backendtest.Run(t, func(t *testing.T) sdk.Backend { return newFake(t, sp) }, backendtest.Options{})
}

// loaded allocates n bytes on ordinal 0 of b and loads a file of them.
func loaded(t *testing.T, b sdk.Backend, n int) (sdk.AllocationID, []byte) {
	t.Helper()
	data := bytes.Repeat([]byte("gpucore!"), n/8)
	path := filepath.Join(t.TempDir(), "weights")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	id, _, err := b.Allocate(t.Context(), 0, uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Load(t.Context(), id, []sdk.Extent{{Path: path, Length: uint64(n)}}, nil); err != nil {
		t.Fatal(err)
	}
	return id, data
}

// exported loads n bytes into a fresh allocation on ordinal 0 of b
// (loaded) and exports it.
func exported(t *testing.T, b sdk.Backend, n int) (sdk.AllocationID, []byte, sdk.Handle) {
	t.Helper()
	id, data := loaded(t, b, n)
	h, err := b.Export(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return id, data, h
}

// reader is the Read of an sdk.Backend or a bare gpucore.Backend.
type reader interface {
	Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error)
}

func read(t *testing.T, b reader, id sdk.AllocationID, n int) []byte {
	t.Helper()
	got, err := b.Read(t.Context(), id, 0, uint64(n))
	if err != nil {
		t.Fatalf("read allocation %d: %v", id, err)
	}
	return got
}

// wantBytes fails the test unless allocation id of b holds want from
// offset 0; what names the allocation.
func wantBytes(t *testing.T, b reader, id sdk.AllocationID, want []byte, what string) {
	t.Helper()
	if got := read(t, b, id, len(want)); !bytes.Equal(got, want) {
		t.Errorf("%s does not hold the exporter's bytes", what)
	}
}

// wantCalls fails the test unless b's fake driver saw want calls of
// method name; what says what made them.
func wantCalls(t *testing.T, b *fakeBackend, name string, want int, what string) {
	t.Helper()
	if n := b.Runtime().drv.Calls(name); n != want {
		t.Errorf("%s: %d %s calls, want %d", what, n, name, want)
	}
}

// Another process's handle is opened once per device: a second import
// shares the mapping, and it is closed when the last id lets go.
func TestImportOpensOncePerDeviceAndClosesAtTheLastFree(t *testing.T) {
	sp := newSpace()
	exporter, importer := newFake(t, sp), newFake(t, sp)
	_, want, h := exported(t, exporter, 1<<20)
	a, err := importer.Import(t.Context(), 0, h)
	if err != nil {
		t.Fatal(err)
	}
	b, err := importer.Import(t.Context(), 0, h)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, importer, "IpcOpen", 1, "two imports on one device")
	wantBytes(t, importer, b, want, "the imported mapping")
	if err := importer.Free(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, importer, "IpcClose", 0, "freeing one of two ids")
	wantBytes(t, importer, b, want, "the second id after the first was freed")
	if err := importer.Free(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, importer, "IpcClose", 1, "freeing the last id")
	if _, err := importer.Import(t.Context(), 1, h); err != nil {
		t.Fatalf("import on device 1: %v", err)
	}
	wantCalls(t, importer, "IpcOpen", 2, "an import on another device, in all")
}

// Legacy IPC cannot open a handle in the process that exported it: an
// import by another Backend of the same Runtime shares the allocation,
// which stays until both ids are freed.
func TestImportOfOwnExportSharesTheAllocation(t *testing.T) {
	owner := newFake(t, newSpace())
	other := owner.Runtime().Core().NewBackend()
	id, want, h := exported(t, owner, 1<<20)
	imp, err := other.Import(t.Context(), 0, h)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, owner, "IpcOpen", 0, "an import of this process's own handle")
	if err := owner.Free(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, owner, "Free", 0, "freeing the exporter's id while an import holds the allocation")
	wantBytes(t, other, imp, want, "the import after the exporter's id was freed")
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, owner, "Free", 1, "closing the last holder")
	if owner.Runtime().drv.usedBytes() != 0 {
		t.Errorf("%d bytes still allocated", owner.Runtime().drv.usedBytes())
	}
}

func TestImportClaimingMoreThanTheAllocationIsInvalid(t *testing.T) {
	sp := newSpace()
	exporter, importer := newFake(t, sp), newFake(t, sp)
	_, _, h := exported(t, exporter, 1<<20)
	h.Size++
	if _, err := importer.Import(t.Context(), 0, h); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("import of a handle claiming one byte more: %v, want ErrInvalidArgument", err)
	}
	wantCalls(t, importer, "IpcOpen", 1, "an oversized import")
	wantCalls(t, importer, "IpcClose", 1, "an oversized import (its mapping closed again)")
	h.Size--
	if _, err := exporter.Import(t.Context(), 0, h); err != nil {
		t.Fatalf("the exporter imports its own handle: %v", err)
	}
	h.Size++
	if _, err := exporter.Import(t.Context(), 0, h); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("the exporter imports its handle claiming one byte more: %v, want ErrInvalidArgument", err)
	}
}

func TestOpenFailuresAreInvalidArguments(t *testing.T) {
	sp := newSpace()
	exporter, importer := newFake(t, sp), newFake(t, sp)
	id, _, h := exported(t, exporter, 1<<20)
	// A second Runtime in the exporting process (no shared export table)
	// reaches the driver, which refuses its own handle: invalid context.
	_, err := newFakeBackendOver(t, exporter.Runtime().drv).Import(t.Context(), 0, h)
	if !errors.Is(err, sdk.ErrInvalidArgument) || !strings.Contains(err.Error(), "process that exported it") {
		t.Errorf("open refused with invalid context: %v", err)
	}
	if err := exporter.Free(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := importer.Import(t.Context(), 0, h); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("import of a freed allocation's handle: %v, want ErrInvalidArgument", err)
	}
}

func TestCloseFreesEverythingAndLaterCallsAreUnavailable(t *testing.T) {
	b := newFake(t, newSpace())
	id, _ := loaded(t, b, 1<<20)
	if _, _, err := b.Allocate(t.Context(), 1, 4096); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, b, "Free", 2, "Close of two allocations")
	wantCalls(t, b, "Cleanup", 2, "Close of two device workers")
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.Read(t.Context(), id, 0, 1); !errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("Read after Close: %v, want ErrUnavailable", err)
	}
	if _, _, err := b.Allocate(t.Context(), 0, 1); !errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("Allocate after Close: %v, want ErrUnavailable", err)
	}
}

// After a fatal driver error the context is gone: Close frees nothing
// (the process exit does).
func TestCloseAfterAFatalErrorFreesNothing(t *testing.T) {
	b := newFake(t, newSpace())
	loaded(t, b, 1<<20)
	b.Runtime().drv.setFatal(errors.New("illegal address (sticky)"))
	if err := b.Backend.Close(); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, b, "Free", 0, "Close after a fatal error")
}

// A Backend that does not own its Runtime leaves it open for the others.
func TestVendorClosesOnlyARuntimeItOwns(t *testing.T) {
	owner := newFake(t, newSpace())
	shared := gpucore.Share(owner.Runtime())
	if err := shared.Close(); err != nil {
		t.Fatal(err)
	}
	if owner.Runtime().Core().IsClosed() {
		t.Fatal("closing a Backend that does not own the Runtime closed it")
	}
	if _, _, err := owner.Allocate(t.Context(), 0, 4096); err != nil {
		t.Fatalf("the owner after another Backend closed: %v", err)
	}
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	if !owner.Runtime().Core().IsClosed() {
		t.Error("closing the owning Backend left the Runtime open")
	}
}

func TestOutOfMemoryLeavesTheBackendUsable(t *testing.T) {
	b := newFake(t, newSpace())
	if _, _, err := b.Allocate(t.Context(), 0, 65<<20); !errors.Is(err, sdk.ErrOutOfMemory) {
		t.Fatalf("allocating more than the device holds: %v, want ErrOutOfMemory", err)
	}
	if _, want := loaded(t, b, 1<<20); len(want) != 1<<20 {
		t.Fatal("short fixture")
	}
}

func TestParseHealthInterval(t *testing.T) {
	for v, want := range map[string]time.Duration{"0": 0, "5s": 5 * time.Second, "250ms": 250 * time.Millisecond} {
		if got, err := gpucore.ParseHealthInterval("X", v); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"-1s", "5", "soon"} {
		if _, err := gpucore.ParseHealthInterval("WCACHE_X_HEALTH_INTERVAL", v); err == nil || !strings.Contains(err.Error(), "WCACHE_X_HEALTH_INTERVAL") {
			t.Errorf("%q: %v, want an error naming the setting", v, err)
		}
	}
}
