package gputest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/internal/poll"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// Plugin is a GPU vendor's plugin as its package's tests see it: the
// binary wcache-backend-<Name> that its TestMain (Plugin.Main) built into
// the folder PluginsEnv names, started on the fake libraries with Env's
// environment. The checks that are the same for every vendor (RunPlugin,
// the peer-copy checks, BenchPeerCopy) take one.
type Plugin struct {
	// Name is the backend's name ("cuda", "rocm").
	Name string
	// PluginDirEnv, when set, names a folder holding a prebuilt plugin
	// (the GPU bundle's bin/), which Main then does not build.
	// PluginsEnv and FakesEnv name the variables through which Main
	// passes the plugin's folder and the fake libraries' to the tests, so
	// that the package keeps no mutable globals.
	PluginDirEnv, PluginsEnv, FakesEnv string
	// Real: the tests run on the vendor's real libraries (the GPU
	// check), and the checks that configure the fakes skip.
	Real bool
	// Info is what the plugin's Info answers: its Platform, and its
	// HandleKinds when not nil.
	Info sdk.Info
	// LibraryEnv is the plugin's variable naming the vendor library,
	// LibraryName the fake's file name, and IPCOpen the entry point the
	// "noipcopen" variant lacks; ManagementEnv and ManagementName the same
	// for the management library (NVML, amdsmi).
	LibraryEnv, LibraryName, IPCOpen string
	ManagementEnv, ManagementName    string
	// StagingBytesEnv is the plugin's staging buffer size variable (Env
	// sets small buffers).
	StagingBytesEnv string
	// FakePrefix is the fake's variable prefix ("FAKECUDA_", "FAKEHIP_"),
	// FakeDevices the value of its DEVICES variable (two devices), and
	// FakeCapacity each fake device's bytes.
	FakePrefix, FakeDevices string
	FakeCapacity            uint64
	// InvalidValue is the vendor's name of its invalid-value error, as a
	// failed call's error names it.
	InvalidValue string
	// HealthEnv is the variable setting the plugin's health-probe
	// interval; FatalError what serve's output says, beside the plugin's
	// exit, after the fake's fatal error 700.
	HealthEnv  string
	FatalError []string
}

// Main is the TestMain of the plugin's package (see the package-level
// Main): the plugin built with go build unless PluginDirEnv names a
// prebuilt one, and the fake libraries built by build, unless Real.
func (p Plugin) Main(m *testing.M, build func(dir string) error) int {
	return Main(m, MainOptions{Name: "wcache-backend-" + p.Name, Real: p.Real, Build: build, LibDirEnv: p.FakesEnv,
		Plugin: p.Name, PluginDirEnv: p.PluginDirEnv, PluginsEnv: p.PluginsEnv})
}

// Env is the plugin's environment on the fakes: the build variant of the
// fake vendor library ("" the full one, "noipcopen" without the IPC open
// entry point, "nopeer" without the peer-copy ones), the fake management
// library, 256 KiB staging buffers, FakeDevices of FakeCapacity bytes and
// slow asynchronous copies, with extra added; on real hardware, extra
// alone (whatever the environment holds).
func (p Plugin) Env(t testing.TB, variant string, extra ...string) []string {
	t.Helper()
	if p.Real {
		return extra
	}
	fakes := os.Getenv(p.FakesEnv)
	return append([]string{
		p.LibraryEnv + "=" + filepath.Join(fakes, variant, p.LibraryName),
		p.ManagementEnv + "=" + filepath.Join(fakes, p.ManagementName),
		p.StagingBytesEnv + "=256KiB",
		p.FakePrefix + "DEVICES=" + p.FakeDevices,
		p.FakePrefix + "MEMORY=" + strconv.FormatUint(p.FakeCapacity, 10),
		p.FakePrefix + "COPY_DELAY_US=20",
	}, extra...)
}

// Path is the plugin binary's path.
func (p Plugin) Path() string {
	return filepath.Join(os.Getenv(p.PluginsEnv), "wcache-backend-"+p.Name)
}

// Start starts the plugin with env through the go-plugin boundary
// (backendtest.StartPlugin), killed at cleanup.
func (p Plugin) Start(t testing.TB, env []string) sdk.Backend {
	t.Helper()
	return backendtest.StartPlugin(t, p.Path(), env...)
}

// StartOnFakes starts the plugin on the fakes' build variant with extra
// added to their environment (Env).
func (p Plugin) StartOnFakes(t testing.TB, variant string, extra ...string) sdk.Backend {
	t.Helper()
	return p.Start(t, p.Env(t, variant, extra...))
}

// NewWorld is the end-to-end setup (World) for the plugin on the fakes,
// with a checkpoint of modelBytes and extra in the environment; it skips
// on real hardware.
func (p Plugin) NewWorld(t *testing.T, modelBytes int, extra ...string) *World {
	t.Helper()
	if p.Real {
		t.Skip("the end-to-end tests run on the fakes")
	}
	return NewWorld(t, p.Name, os.Getenv(p.PluginsEnv), modelBytes, p.Env(t, "", extra...))
}

// RunPlugin runs the checks every GPU plugin passes the same way, as
// subtests: run by hand it explains itself; a missing vendor library or
// entry point reaches the host typed; the peer copies; a fatal vendor
// error ends the plugin, and ends `wcache serve` naming it. All but the
// first configure the fakes and skip on real hardware.
func RunPlugin(t *testing.T, p Plugin) {
	t.Run("RunByHandExplains", func(t *testing.T) { backendtest.CheckRunByHand(t, p.Path()) })
	fakes := func(name string, check func(t *testing.T, p Plugin)) {
		t.Run(name, func(t *testing.T) {
			if p.Real {
				t.Skip("the check configures the fake vendor library")
			}
			check(t, p)
		})
	}
	fakes("UnavailableReachesTheHostTyped", CheckUnavailableReachesTheHost)
	fakes("PeerCopyAcrossDevices", CheckPeerCopyAcrossDevices)
	fakes("PeerCopyWithoutEntryPoints", CheckPeerCopyWithoutEntryPoints)
	fakes("PeerCopyFailureLeavesNothing", CheckPeerCopyFailureLeavesNothing)
	fakes("FatalErrorEndsThePlugin", CheckFatalErrorEndsThePlugin)
	fakes("ServeStopsWithTheFatalReason", CheckServeStopsWithTheFatalReason)
}

// CheckUnavailableReachesTheHost starts the plugin with a vendor library
// that cannot be used (missing; the "noipcopen" build, without an entry
// point) and checks that it still serves: Info answers with p.Info,
// Devices fails with ErrUnavailable naming the library (and the entry
// point), and Allocate with ErrUnavailable. A GPU plugin whose library is
// missing reaches the host typed, not as a dead process.
func CheckUnavailableReachesTheHost(t *testing.T, p Plugin) {
	missing := filepath.Join(t.TempDir(), p.LibraryName)
	symbolLess := filepath.Join(os.Getenv(p.FakesEnv), "noipcopen", p.LibraryName)
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"missing library": {p.Env(t, "", p.LibraryEnv+"="+missing), "backend unavailable: cannot load " + missing},
		"missing symbol":  {p.Env(t, "noipcopen"), "backend unavailable: " + symbolLess + ": missing symbol " + p.IPCOpen},
	} {
		t.Run(name, func(t *testing.T) {
			b := p.Start(t, tc.env)
			ctx := context.Background()
			info, err := b.Info(ctx)
			if err != nil || info.Platform != p.Info.Platform ||
				(p.Info.HandleKinds != nil && strings.Join(info.HandleKinds, ",") != strings.Join(p.Info.HandleKinds, ",")) {
				t.Fatalf("Info = %+v, %v; want the %s backend's info (%+v)", info, err, p.Info.Platform, p.Info)
			}
			if _, err := b.Devices(ctx); !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Devices = %v, want ErrUnavailable containing %q", err, tc.want)
			}
			if _, _, err := b.Allocate(ctx, 0, 4096); !errors.Is(err, sdk.ErrUnavailable) {
				t.Fatalf("Allocate = %v, want ErrUnavailable", err)
			}
		})
	}
}

// CheckFatalErrorEndsThePlugin: after the fake's fatal error 700 (a
// sticky CUDA error, a fatal HIP one) the plugin reports ErrUnavailable
// and exits, so every later call fails. (That the host's exit error
// carries the vendor's error is the daemon's plugin-exit path, covered by
// core/pluginhost's crash tests and CheckServeStopsWithTheFatalReason.)
func CheckFatalErrorEndsThePlugin(t *testing.T, p Plugin) {
	trigger := filepath.Join(t.TempDir(), "fatal")
	b := p.StartOnFakes(t, "", p.FakePrefix+"STICKY_FILE="+trigger)
	ctx := context.Background()
	id, _, err := b.Allocate(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, id, 0, 16); !errors.Is(err, sdk.ErrUnavailable) {
		// Either the plugin's answer (naming error 700) or, when it exits
		// before answering, the lost connection: both are ErrUnavailable.
		t.Fatalf("Read after the fault = %v, want ErrUnavailable", err)
	}
	poll.Eventually(t, 20*time.Second, "the plugin to stop answering after a fatal error", func() bool {
		_, err := b.Info(ctx)
		return err != nil
	})
}

// CheckServeStopsWithTheFatalReason runs the real `wcache serve` on the
// fakes, injects the fatal error 700 once it serves and is idle (only the
// plugin's health probe calls the vendor library), and checks what an
// operator sees: serve exits non-zero, and its output names the plugin's
// exit and the vendor's error (p.FatalError), not just "plugin exited".
func CheckServeStopsWithTheFatalReason(t *testing.T, p Plugin) {
	trigger := filepath.Join(t.TempDir(), "fatal")
	w := p.NewWorld(t, 64<<10, p.FakePrefix+"STICKY_FILE="+trigger, p.HealthEnv+"=200ms")
	d := w.Start("serving ", append(append([]string{"serve"}, w.BackendArgs()...), "--gpu-id", "0", "--model", w.Model)...)
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing calls the library now: the plugin's health probe must find
	// the error on its own.
	var err error
	select {
	case err = <-d.Done:
		d.Done <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30 s after a fatal error:\n%s", d.Output())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("serve ended with %v, want a non-zero exit:\n%s", err, d.Output())
	}
	out := d.Output()
	for _, want := range append([]string{"backend plugin exited", "exit status " + strconv.Itoa(sdk.ExitFatal)}, p.FatalError...) {
		if !strings.Contains(out, want) {
			t.Errorf("serve's output does not name %q:\n%s", want, out)
		}
	}
}
