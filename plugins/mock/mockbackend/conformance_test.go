package mockbackend_test

import (
	"path/filepath"
	"testing"

	"github.com/wcache/wcache/plugins/mock/mockbackend"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/sdk/names"
)

// TestConformanceInProcess runs the suite against the mock without the
// plugin boundary; plugins/mock's TestConformanceSubprocess runs it
// through the real plugin binary.
func TestConformanceInProcess(t *testing.T) {
	// One folder for all instances, as mock processes of one user share one.
	dir := filepath.Join(t.TempDir(), "shm")
	for _, kind := range []string{names.KindMemfd, names.KindPosixShm} {
		t.Run(kind, func(t *testing.T) { conformanceInProcess(t, dir, kind) })
	}
}

func conformanceInProcess(t *testing.T, dir, kind string) {
	backendtest.Run(t, func(t *testing.T) sdk.Backend {
		cfg := mockbackend.DefaultConfig()
		cfg.Memory = 64 << 20
		cfg.Dir = dir
		cfg.Handle = kind
		return backendtest.Open(t, func() (*mockbackend.Backend, error) { return mockbackend.New(cfg, nil) })
	}, backendtest.Options{})
}
