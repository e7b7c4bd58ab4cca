package pluginhost

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/sdk"
)

func TestPluginLogFieldsKeepTheirTypes(t *testing.T) {
	_, out := startLoggedMock(t, hclog.Debug, "WCACHE_MOCK_MEMORY=4GiB")
	_, _ = poll.Until(context.Background(), 5*time.Second, func() bool { return strings.Contains(out.String(), "mock backend ready") })
	logs := out.String()
	if !strings.Contains(logs, "memory_per_device=4294967296") || strings.Contains(logs, "e+09") {
		t.Fatalf("the uint64 field did not keep its type:\n%s", logs)
	}
	if strings.Count(logs, "mock backend ready") != 1 {
		t.Fatalf("the plugin's line was forwarded %d times:\n%s", strings.Count(logs, "mock backend ready"), logs)
	}
}

func TestOptionsAreRefusedByAPluginWithoutSchema(t *testing.T) {
	_, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger(),
		Env: mockEnv(filepath.Join(t.TempDir(), "shm")), BackendOptions: map[string]string{"speed": "11"}})
	var ce *ConfigureError
	if !errors.As(err, &ce) || !errors.Is(err, sdk.ErrInvalidArgument) || !strings.Contains(err.Error(), `"speed"`) ||
		!strings.Contains(err.Error(), "declares no options") {
		t.Fatalf("Start with an unknown option = %v, want a *ConfigureError naming it", err)
	}
}

func TestTheNewestCommonAPIVersionIsPicked(t *testing.T) {
	p := startMock(t, filepath.Join(t.TempDir(), "shm"))
	if p.APIVersion() != sdk.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", p.APIVersion(), sdk.APIVersion)
	}
	// A host that speaks only version 1 still runs the same binary, and
	// refuses options it cannot send.
	old, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger(),
		Env: mockEnv(filepath.Join(t.TempDir(), "shm")), APIVersions: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if old.APIVersion() != 1 {
		t.Fatalf("negotiated %d with a version-1 host", old.APIVersion())
	}
	if _, err := old.Backend().Devices(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err = Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger(),
		Env: mockEnv(filepath.Join(t.TempDir(), "shm")), APIVersions: []int{1}, BackendOptions: map[string]string{"a": "b"}})
	if !errors.Is(err, ErrConfigure) || !strings.Contains(err.Error(), "API version 1") {
		t.Fatalf("options to a version-1 plugin: %v", err)
	}
}

func TestPanicInAHandlerIsAnErrorAndThePluginServesOn(t *testing.T) {
	p, out := startLoggedMock(t, hclog.Info, "WCACHE_MOCK_PANIC_DIGEST=panic")
	b := p.Backend()
	id, err := digestNewAllocation(t, b)
	if err == nil || !strings.Contains(err.Error(), "injected panic in digest") {
		t.Fatalf("Digest = %v, want the panic's message", err)
	}
	if err := b.Free(t.Context(), id); err != nil {
		t.Fatalf("the plugin stopped serving after a recovered panic: %v", err)
	}
	_, _ = poll.Until(context.Background(), 5*time.Second, func() bool { return strings.Contains(out.String(), "panic in a backend call") })
	logs := out.String()
	if n := strings.Count(logs, "[running]:"); n != 1 {
		t.Fatalf("the stack appears %d times in the host's log, want once:\n%s", n, logs)
	}
}

func TestFatalInAHandlerEndsThePlugin(t *testing.T) {
	p := startMock(t, filepath.Join(t.TempDir(), "shm"), "WCACHE_MOCK_PANIC_DIGEST=fatal")
	_, err := digestNewAllocation(t, p.Backend())
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "injected driver failure") {
		t.Fatalf("Digest = %v, want ErrUnavailable with the fatal error", err)
	}
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not exit after sdk.Fatal")
	}
	if xerr := p.ExitError(); xerr == nil || !strings.Contains(xerr.Error(), "exit status 70") {
		t.Fatalf("ExitError = %v, want exit status %d", xerr, sdk.ExitFatal)
	}
}

// A plugin that crashes with a Go panic (on a goroutine nothing recovers)
// has its dump forwarded once, whole; the *ExitError keeps only its head.
func TestCrashDumpIsPrintedOnce(t *testing.T) {
	p, out := startLoggedMock(t, hclog.Warn, "WCACHE_MOCK_PANIC_DIGEST=crash")
	_, err := digestNewAllocation(t, p.Backend())
	var xe *ExitError
	if !errors.As(err, &xe) {
		t.Fatalf("Digest = %v, want the *ExitError of the crashed plugin", err)
	}
	msg := xe.Error()
	if !strings.Contains(msg, "panic: injected crash in a goroutine") || !strings.Contains(msg, "more lines of the stack trace") {
		t.Fatalf("ExitError does not show the dump's head and a count of the rest:\n%s", msg)
	}
	logs := out.String()
	if !strings.Contains(logs, "panic: injected crash in a goroutine") || !strings.Contains(logs, "main.newBackend") {
		t.Fatalf("the host's log lacks the dump:\n%s", logs)
	}
	// Past the few lines the error keeps, every line of the dump appears
	// once in the log and the error together.
	if n := strings.Count(logs+msg, "created by main.newBackend"); n != 1 {
		t.Fatalf("a frame of the dump appears %d times in the log and the error:\n%s\n----\n%s", n, logs, msg)
	}
}

// A plugin and a host that share no version: the error names both sides
// and says what an outside author does about it.
func TestNoCommonAPIVersionIsExplained(t *testing.T) {
	_, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger(),
		Env: mockEnv(filepath.Join(t.TempDir(), "shm")), APIVersions: []int{7}})
	var ve *APIVersionError
	if !errors.As(err, &ve) || ve.Got != 1 || ve.Expected != 7 {
		t.Fatalf("Start with a host of version 7 = %v, want an *APIVersionError (got 1, expected 7)", err)
	}
	for _, want := range []string{"speaks backend API version 1", "expects version 7", "github.com/wcache/wcache/sdk",
		"docs/writing-a-backend.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// digestNewAllocation allocates 4 KiB on device 0 and digests its first 16
// bytes: the call that WCACHE_MOCK_PANIC_DIGEST makes the mock fail. It
// fails t if the allocation fails.
func digestNewAllocation(t *testing.T, b sdk.Backend) (sdk.AllocationID, error) {
	t.Helper()
	id, _, err := b.Allocate(t.Context(), 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Digest(t.Context(), id, []sdk.Range{{Offset: 0, Length: 16}})
	return id, err
}
