package backendtest

import (
	"context"
	"errors"
	"testing"

	"github.com/wcache/wcache/sdk"
)

// suite carries what every subtest needs.
type suite struct {
	newBackend func(t *testing.T) sdk.Backend
	opts       Options
}

// Run runs the conformance suite against the backends newBackend returns.
func Run(t *testing.T, newBackend func(t *testing.T) sdk.Backend, opts Options) {
	t.Helper()
	s := &suite{newBackend: newBackend, opts: opts.withDefaults()}
	t.Run("Info", s.testInfo)
	t.Run("Devices/ListMatchesDeviceUUID", s.testDevicesList)
	t.Run("Devices/UUIDsStableAcrossCalls", s.testUUIDsStableAcrossCalls)
	t.Run("Devices/UUIDsStableAcrossRestart", s.testUUIDsStableAcrossRestart)
	t.Run("Devices/UnknownOrdinal", s.testUnknownOrdinal)
	t.Run("Allocate/ReservesAtLeastRequested", s.testAllocate)
	t.Run("Allocate/OutOfMemoryIsTypedAndRecoverable", s.testOutOfMemory)
	t.Run("Load/RoundTrip", s.testLoadRoundTrip)
	t.Run("Load/Progress", s.testLoadProgress)
	t.Run("ExportImport/RoundTrip", s.testExportImport)
	t.Run("ExportImport/MappableByClient", s.testMappableByClient)
	t.Run("PeerCopy/CopiesAndLeavesTheSource", s.testPeerCopy)
	t.Run("PeerCopy/PastTheSourceRefused", s.testPeerCopyTooLong)
	t.Run("Configure/SchemaIsValid", s.testConfigureSchema)
	t.Run("Configure/DefaultsServe", s.testConfigureDefaults)
	t.Run("Configure/UnknownKeyRefused", s.testConfigureUnknownKey)
	t.Run("Errors/AllocateUnknownOrdinal", s.testAllocateUnknownOrdinal)
	t.Run("Errors/AllocateZeroBytes", s.testAllocateZero)
	t.Run("Errors/FreeTwice", s.testFreeTwice)
	t.Run("Errors/UnknownAllocation", s.testUnknownAllocation)
	t.Run("Errors/ReadPastEnd", s.testReadPastEnd)
	t.Run("Errors/ReadTooLarge", s.testReadTooLarge)
	t.Run("Errors/DigestPastEnd", s.testDigestPastEnd)
	t.Run("Errors/ExtentPastAllocationEnd", s.testExtentPastAllocationEnd)
	t.Run("Errors/ExtentPastFileEnd", s.testExtentPastFileEnd)
	t.Run("Errors/ExtentFileMissing", s.testExtentFileMissing)
	t.Run("Errors/LoadIntoFreedAllocation", s.testLoadIntoFreed)
	t.Run("Errors/ReadFreedAllocation", s.testReadFreed)
	t.Run("Errors/ImportGarbageHandle", s.testImportGarbage)
	t.Run("Errors/ImportUnknownKind", s.testImportUnknownKind)
	t.Run("Errors/ImportUnknownOrdinal", s.testImportUnknownOrdinal)
	t.Run("Concurrency/AllocateLoadDigestFree", s.testConcurrency)
}

// ctx returns a context bounded by CallTimeout and the test's life.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), s.opts.CallTimeout)
	t.Cleanup(cancel)
	return ctx
}

// wantKind fails the test unless err wraps kind.
func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded, want an error wrapping %q", what, kind)
	}
	if !errors.Is(err, kind) {
		t.Fatalf("%s: error %q (%T) does not wrap %q", what, err, err, kind)
	}
}

// allocate allocates or fails the test, and frees at cleanup unless the
// test freed it (a second free then fails with ErrNoSuchAllocation, which
// is ignored).
func (s *suite) allocate(t *testing.T, b sdk.Backend, bytes uint64) (sdk.AllocationID, uint64) {
	t.Helper()
	id, got, err := b.Allocate(s.ctx(t), s.opts.Ordinal, bytes)
	if err != nil {
		t.Fatalf("Allocate(%d, %d): %v", s.opts.Ordinal, bytes, err)
	}
	if got < bytes {
		t.Fatalf("Allocate(%d) reserved %d bytes, fewer than asked", bytes, got)
	}
	t.Cleanup(func() {
		if err := b.Free(context.Background(), id); err != nil && !errors.Is(err, sdk.ErrNoSuchAllocation) {
			t.Errorf("cleanup Free(%d): %v", id, err)
		}
	})
	return id, got
}

// assertUsable checks that the backend still serves a full small cycle
// after an error.
func (s *suite) assertUsable(t *testing.T, b sdk.Backend) {
	t.Helper()
	ctx := s.ctx(t)
	id, _, err := b.Allocate(ctx, s.opts.Ordinal, 4096)
	if err != nil {
		t.Fatalf("backend unusable after the error: Allocate: %v", err)
	}
	if _, err := b.Digest(ctx, id, []sdk.Range{{Offset: 0, Length: 4096}}); err != nil {
		t.Fatalf("backend unusable after the error: Digest: %v", err)
	}
	if err := b.Free(ctx, id); err != nil {
		t.Fatalf("backend unusable after the error: Free: %v", err)
	}
}

// readAll reads [offset, offset+length) in MaxReadBytes pieces.
func readAll(ctx context.Context, b sdk.Backend, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	out := make([]byte, 0, length)
	for length > 0 {
		n := min(length, sdk.MaxReadBytes)
		p, err := b.Read(ctx, id, offset, n)
		if err != nil {
			return nil, err
		}
		if uint64(len(p)) != n {
			return nil, errors.New("short read")
		}
		out = append(out, p...)
		offset += n
		length -= n
	}
	return out, nil
}
