package cudabackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
)

func TestExclusiveProcessIsRefusedWithTheWayOut(t *testing.T) {
	noMPS := t.TempDir() // an MPS pipe directory without a control socket
	cfg := fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKECUDA_COMPUTE_MODE": "3", "CUDA_MPS_PIPE_DIRECTORY": noMPS}})
	_, err := New(cfg, nil)
	var me *ComputeModeError
	if !errors.Is(err, sdk.ErrUnavailable) || !errors.As(err, &me) || me.Mode != driver.ComputeModeExclusiveProcess {
		t.Fatalf("New on an Exclusive_Process GPU = %v, want a *ComputeModeError wrapping ErrUnavailable", err)
	}
	for _, want := range []string{"Exclusive_Process", "lock every inference engine out", "MPS", "nvidia-smi -i " + me.UUID + " -c DEFAULT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
}

func TestExclusiveProcessServesUnderMPS(t *testing.T) {
	pipe := t.TempDir()
	if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKECUDA_COMPUTE_MODE": "3", "CUDA_MPS_PIPE_DIRECTORY": pipe}})
	b := newBackend(t, cfg)
	if _, _, err := b.Allocate(context.Background(), 0, 1<<20); err != nil {
		t.Fatalf("Allocate under MPS: %v", err)
	}
}

func TestProhibitedIsRefused(t *testing.T) {
	cfg := fakeConfig(t, gputest.FakeOptions{Env: map[string]string{"FAKECUDA_COMPUTE_MODE": "2"}})
	_, err := New(cfg, nil)
	var me *ComputeModeError
	if !errors.As(err, &me) || me.Mode != driver.ComputeModeProhibited || !strings.Contains(err.Error(), "Prohibited") {
		t.Fatalf("New on a Prohibited GPU = %v", err)
	}
}

func TestListingDevicesCreatesNoContext(t *testing.T) {
	// Retaining a primary context fails (as on a GPU another process holds
	// in Exclusive_Process mode): listing must not need one.
	cfg := fakeConfig(t, gputest.FakeOptions{NoManagement: true, Env: map[string]string{"FAKECUDA_RETAIN_ERROR": "46"}})
	b := newBackend(t, cfg)
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatalf("Devices without NVML = %v; it must not create a context", err)
	}
	for _, d := range devs {
		if d.FreeMemory != 0 || d.TotalMemory != fakeMemory {
			t.Errorf("device %d: free %d total %d; want free 0 (unknown) and total %d", d.Ordinal, d.FreeMemory, d.TotalMemory, fakeMemory)
		}
	}
	if _, _, err := b.Allocate(context.Background(), 0, 1<<20); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Allocate with an unretainable context = %v, want ErrUnavailable", err)
	}
}

func TestFreeMemoryKnownOnceAWorkerHoldsTheContext(t *testing.T) {
	b := newBackend(t, fakeConfig(t, gputest.FakeOptions{NoManagement: true}))
	ctx := context.Background()
	if _, _, err := b.Allocate(ctx, 1, 4<<20); err != nil {
		t.Fatal(err)
	}
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].FreeMemory != 0 || devs[1].FreeMemory != fakeMemory-4<<20 {
		t.Fatalf("free = %d, %d; want 0 (unknown, no context) and %d", devs[0].FreeMemory, devs[1].FreeMemory, fakeMemory-4<<20)
	}
}
