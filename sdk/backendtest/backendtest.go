// Package backendtest is the conformance suite every wcache backend must
// pass. A backend's test calls Run with a factory:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) sdk.Backend {
//			b := mybackend.New(...)
//			t.Cleanup(func() { b.Close() })
//			return b
//		}, backendtest.Options{})
//	}
//
// The factory is called once per subtest, and twice in the subtests that
// model a restart or another process, so it must return an independent
// instance each time (for a plugin: a new process). Subtests are named
// Area/Case, e.g. "Errors/ReadPastEnd", so `go test -run` can select them.
package backendtest

import (
	"regexp"
	"time"

	"github.com/wcache/wcache/sdk"
)

// Vendor UUID forms a backend may pin with Options.UUIDPatterns.
const (
	// NVIDIAUUIDPattern: GPU-/MIG- followed by the 8-4-4-4-12 lowercase hex
	// form (what nvidia-smi -L and cuDeviceGetUuid_v2 formatting give).
	NVIDIAUUIDPattern = `^(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	// AMDUUIDPattern: GPU- and 16 hex digits (the HIP UUID).
	AMDUUIDPattern = `^GPU-[0-9a-fA-F]{16}$`
)

// Options tune the suite. The zero value suits a backend with at least one
// device that can hold a few MiB.
type Options struct {
	// Ordinal is the device the suite works on. Default 0.
	Ordinal int
	// Every UUID must pass the core's rule (names.ValidateDeviceUUID:
	// ASCII letters, digits and '-', 1 to 128 characters), the only rule by
	// default. UUIDPrefix, when set, pins a vendor prefix every UUID must
	// start with ("GPU-", "ACME-"); UUIDPatterns, when set, are the forms
	// one of which every UUID must match (NVIDIAUUIDPattern, say).
	UUIDPrefix   string
	UUIDPatterns []*regexp.Regexp
	// OOMSize is an allocation size that must fail with ErrOutOfMemory.
	// Default: the device's TotalMemory + 1.
	OOMSize uint64
	// Concurrency is the number of goroutines in Concurrency/*. Default 8.
	Concurrency int
	// CallTimeout bounds every backend call. Default 2 minutes.
	CallTimeout time.Duration
	// MapHandle, when set, maps an exported handle into the test process
	// as a client would, for ExportImport/MappableByClient: the bytes must
	// be the loaded ones. The sdk cannot import the core, so a test that
	// can (core/ or a backend's own module) passes the real Go client's
	// registry, client.Mappers.MapSDKHandle, with the backend's vendor
	// Mapper registered. nil: the subtest is skipped, saying why.
	MapHandle func(h sdk.Handle) (data []byte, release func() error, err error)
}

func (o Options) withDefaults() Options {
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 2 * time.Minute
	}
	return o
}
