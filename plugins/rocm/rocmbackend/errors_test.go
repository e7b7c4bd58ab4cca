package rocmbackend

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/internal/gputest"
	"github.com/wcache/wcache/sdk"
)

func TestMissingLibraryOrSymbolIsUnavailable(t *testing.T) {
	cfg := fakeConfig(t, gputest.FakeOptions{})
	cfg.Library = filepath.Join(t.TempDir(), "libamdhip64.so.7")
	_, err := New(cfg, nil)
	var le *dl.LoadError
	if !errors.As(err, &le) || !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "backend unavailable: cannot load "+cfg.Library) {
		t.Errorf("missing library: %v", err)
	}
	cfg = fakeConfig(t, gputest.FakeOptions{Variant: "noipcopen"})
	_, err = New(cfg, nil)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "missing symbol hipIpcOpenMemHandle") {
		t.Errorf("missing symbol: %v", err)
	}
	_, err = New(fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKEHIP_INIT_ERROR": "100"}}), nil)
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "hipInit") {
		t.Errorf("hipInit failing: %v", err)
	}
}
