package pluginhost

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

func TestConformanceThroughSubprocess(t *testing.T) {
	shm := filepath.Join(t.TempDir(), "shm")
	backendtest.Run(t, func(t *testing.T) sdk.Backend {
		return startMock(t, shm).Backend()
	}, backendtest.Options{MapHandle: client.DefaultMappers().MapSDKHandle})
}

func TestResolveReportsEveryFolderSearched(t *testing.T) {
	flagDir, envDir := t.TempDir(), t.TempDir()
	opts := Options{PluginDir: flagDir, Getenv: func(k string) string {
		if k == EnvPluginDir {
			return envDir
		}
		return ""
	}}
	_, err := Resolve("nosuch", opts)
	var nf *NotFoundError
	if !errors.Is(err, ErrPluginNotFound) || !errors.As(err, &nf) {
		t.Fatalf("Resolve = %v, want *NotFoundError", err)
	}
	exe, _ := os.Executable()
	want := []string{flagDir, envDir, filepath.Dir(exe), SystemPluginDir}
	if strings.Join(nf.Searched, "|") != strings.Join(want, "|") {
		t.Errorf("searched %v, want %v", nf.Searched, want)
	}
	for _, d := range append(want, "wcache-backend-nosuch") {
		if !strings.Contains(err.Error(), d) {
			t.Errorf("error %q does not mention %s", err, d)
		}
	}
}

func TestResolveTakesTheFirstFolderInOrder(t *testing.T) {
	mock := filepath.Join(testPlugins(), "wcache-backend-mock")
	first, second := privateCopy(t, mock), privateCopy(t, mock)
	opts := Options{PluginDir: filepath.Dir(first), Getenv: func(k string) string {
		if k == EnvPluginDir {
			return filepath.Dir(second)
		}
		return ""
	}}
	if got, err := Resolve("mock", opts); err != nil || got != first {
		t.Fatalf("Resolve = %q, %v; want the --plugin-dir copy %q", got, err, first)
	}
	opts.PluginDir = ""
	if got, err := Resolve("mock", opts); err != nil || got != second {
		t.Fatalf("Resolve = %q, %v; want the $%s copy %q", got, err, EnvPluginDir, second)
	}
}

func TestResolveRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "../mock", "Mock", "mo ck", "mock/x", strings.Repeat("a", 65)} {
		if _, err := Resolve(name, Options{PluginDir: testPlugins()}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Resolve(%q) = %v, want ErrInvalidName", name, err)
		}
	}
}

// privateCopy copies a plugin into a fresh 0700 folder and returns its path.
func privateCopy(t *testing.T, src string) string {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "plugins-")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	pathstest.CopyFile(t, src, dst, 0o755)
	return dst
}

func TestWritablePluginIsRefused(t *testing.T) {
	bin := privateCopy(t, filepath.Join(testPlugins(), "wcache-backend-mock"))
	if err := os.Chmod(bin, 0o757); err != nil {
		t.Fatal(err)
	}
	_, err := Start(t.Context(), "mock", Options{PluginDir: filepath.Dir(bin), Logger: hclog.NewNullLogger()})
	var ie *InsecurePluginError
	if !errors.Is(err, ErrInsecurePlugin) || !errors.As(err, &ie) || ie.Path != bin || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("Start with a world-writable plugin = %v, want *InsecurePluginError naming %s", err, bin)
	}
}

func TestPluginInWritableFolderIsRefused(t *testing.T) {
	bin := privateCopy(t, filepath.Join(testPlugins(), "wcache-backend-mock"))
	if err := os.Chmod(filepath.Dir(bin), 0o775); err != nil {
		t.Fatal(err)
	}
	_, err := Resolve("mock", Options{PluginDir: filepath.Dir(bin)})
	var ie *InsecurePluginError
	if !errors.As(err, &ie) || ie.Path != filepath.Dir(bin) {
		t.Fatalf("Resolve in a group-writable folder = %v, want *InsecurePluginError naming the folder", err)
	}
}

func TestSymlinkInWritableFolderIsRefused(t *testing.T) {
	bin := privateCopy(t, filepath.Join(testPlugins(), "wcache-backend-mock"))
	linkDir := filepath.Join(t.TempDir(), "links")
	if err := os.Mkdir(linkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(linkDir, "wcache-backend-mock")); err != nil {
		t.Fatal(err)
	}
	if got, err := Resolve("mock", Options{PluginDir: linkDir}); err != nil || got != bin {
		t.Fatalf("Resolve through a private symlink = %q, %v; want %s", got, err, bin)
	}
	if err := os.Chmod(linkDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve("mock", Options{PluginDir: linkDir}); !errors.Is(err, ErrInsecurePlugin) {
		t.Fatalf("Resolve through a symlink in a world-writable folder = %v, want ErrInsecurePlugin", err)
	}
}

func TestChecksumPin(t *testing.T) {
	bin := filepath.Join(testPlugins(), "wcache-backend-mock")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	shm := filepath.Join(t.TempDir(), "shm")

	p, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), SHA256: strings.ToUpper(good), Env: mockEnv(shm), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatalf("Start with the right pin: %v", err)
	}
	p.Close()

	wrong := strings.Repeat("0", 64)
	_, err = Start(t.Context(), "mock", Options{PluginDir: testPlugins(), SHA256: wrong, Logger: hclog.NewNullLogger()})
	var ce *ChecksumError
	if !errors.Is(err, ErrChecksumMismatch) || !errors.As(err, &ce) || ce.Got != good || ce.Expected != wrong {
		t.Fatalf("Start with a wrong pin = %v, want *ChecksumError with both digests", err)
	}
	for _, bad := range []string{"abc", strings.Repeat("z", 64)} {
		if _, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), SHA256: bad, Logger: hclog.NewNullLogger()}); err == nil || errors.Is(err, ErrChecksumMismatch) {
			t.Errorf("pin %q: err = %v, want a malformed-pin error", bad, err)
		}
	}
}

func TestWrongAPIVersionIsNamed(t *testing.T) {
	_, err := Start(t.Context(), "badversion", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger()})
	var ve *APIVersionError
	if !errors.Is(err, ErrAPIVersion) || !errors.As(err, &ve) {
		t.Fatalf("Start(badversion) = %v, want *APIVersionError", err)
	}
	if ve.Expected != sdk.APIVersion || ve.Got != sdk.APIVersion+1 {
		t.Errorf("versions expected=%d got=%d", ve.Expected, ve.Got)
	}
	msg := err.Error()
	if !strings.Contains(msg, "version "+strconv.Itoa(sdk.APIVersion+1)) || !strings.Contains(msg, "expects version "+strconv.Itoa(sdk.APIVersion)) {
		t.Errorf("message %q does not name both versions", msg)
	}
}

func TestNonPluginFailsWithItsOutput(t *testing.T) {
	cases := []struct {
		name, script string
		want         []string
	}{
		{"ExitsBeforeHandshake", "#!/bin/sh\necho 'libcuda.so.1: cannot open shared object file' >&2\nexit 7\n",
			[]string{"libcuda.so.1: cannot open shared object file", "exit status 7"}},
		{"PrintsSomethingElse", "#!/bin/sh\necho 'starting' >&2\necho hello\nexec sleep 30\n",
			[]string{"starting", `printed "hello"`, "stopped it"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp(t.TempDir(), "plugins-")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "wcache-backend-broken"), []byte(tc.script), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err = Start(t.Context(), "broken", Options{PluginDir: dir, Logger: hclog.NewNullLogger()})
			var xe *ExitError
			if !errors.Is(err, sdk.ErrUnavailable) || !errors.As(err, &xe) {
				t.Fatalf("Start(broken) = %v, want *ExitError", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q: %v", want, err)
				}
			}
		})
	}
}

func TestCrashDuringACallIsReportedWithItsLog(t *testing.T) {
	shm := filepath.Join(t.TempDir(), "shm")
	p := startMock(t, shm, "WCACHE_MOCK_CRASH_LOAD_AFTER=1")
	b := p.Backend()
	ctx := t.Context()
	weights := filepath.Join(t.TempDir(), "w.safetensors")
	if err := os.WriteFile(weights, bytes.Repeat([]byte{7}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	id, _, err := b.Allocate(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Load(ctx, id, []sdk.Extent{{Path: weights, Length: 1 << 20}}, nil)
	var xe *ExitError
	if !errors.Is(err, sdk.ErrUnavailable) || !errors.As(err, &xe) {
		t.Fatalf("Load in a crashing plugin = %v, want *ExitError wrapping ErrUnavailable", err)
	}
	var status *exec.ExitError
	if !errors.As(err, &status) || status.ExitCode() != testCrashExitCode {
		t.Errorf("exit status in %v, want %d", err, testCrashExitCode)
	}
	if xe.PID != p.PID() || !strings.Contains(err.Error(), "injected crash during load") {
		t.Errorf("error does not name pid %d or carry the plugin's last log line: %v", p.PID(), err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after the crash")
	}
	if !errors.Is(p.ExitError(), sdk.ErrUnavailable) {
		t.Errorf("ExitError() = %v", p.ExitError())
	}
	// Every later call fails the same way, at once.
	if _, err := b.Devices(ctx); !errors.As(err, &xe) {
		t.Errorf("Devices after the crash = %v, want *ExitError", err)
	}
	// The crash left its file; the next mock on the folder removes it.
	if files, _ := filepath.Glob(filepath.Join(shm, "*.shm")); len(files) != 1 {
		t.Fatalf("files after the crash: %v, want the one left behind", files)
	}
	startMock(t, shm)
	if files, _ := filepath.Glob(filepath.Join(shm, "*.shm")); len(files) != 0 {
		t.Fatalf("files after the next mock started: %v", files)
	}
}

func TestCloseEndsThePluginAndItsFiles(t *testing.T) {
	shm := filepath.Join(t.TempDir(), "shm")
	p := startMock(t, shm)
	if _, _, err := p.Backend().Allocate(t.Context(), 1, 1<<20); err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	if processGone(pid) {
		t.Fatalf("plugin pid %d not running", pid)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !processGone(pid) {
		t.Fatalf("plugin pid %d still running after Close", pid)
	}
	if p.ExitError() != nil {
		t.Errorf("ExitError after Close = %v, want nil", p.ExitError())
	}
	if files, _ := filepath.Glob(filepath.Join(shm, "*.shm")); len(files) != 0 {
		t.Errorf("allocation files after Close: %v", files)
	}
	if _, err := os.Stat(p.socketDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket folder %s left behind: %v", p.socketDir, err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPluginLogsAreForwarded(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Debug, Output: lockedWriter{&mu, &buf}})
	p, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: logger, Env: mockEnv(filepath.Join(t.TempDir(), "shm"))})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "host.wcache-backend-mock: mock backend ready") {
		t.Fatalf("plugin log line not forwarded under the plugin's name; host log:\n%s", buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestLongTempDirFallsBackToShortSocketFolder(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 90))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	p := startMock(t, filepath.Join(t.TempDir(), "shm"))
	if !strings.HasPrefix(p.socketDir, "/tmp/") {
		t.Errorf("socket folder %s, want one under /tmp", p.socketDir)
	}
	if _, err := p.Backend().Devices(t.Context()); err != nil {
		t.Fatalf("Devices: %v", err)
	}
	if _, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), SocketDir: long}); err == nil {
		t.Error("an explicit socket folder too long for sun_path was accepted")
	}
}

func TestStartHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := Start(ctx, "mock", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger(), Env: mockEnv(filepath.Join(t.TempDir(), "shm"))})
	if err == nil {
		p.Close()
		t.Fatal("Start with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v, want context.Canceled", err)
	}
}

func TestNoOrphanAfterHostIsKilled(t *testing.T) {
	shm := filepath.Join(t.TempDir(), "shm")
	sockets := pathstest.ShortDir(t)
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), helperEnv+"=orphan", "HELPER_PLUGIN_DIR="+testPlugins(), "HELPER_SHM_DIR="+shm,
		"HELPER_SOCKET_BASE="+sockets)
	var stderr bytes.Buffer
	host.Stderr = &stderr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "pid=") {
		_ = host.Process.Kill()
		_ = host.Wait()
		t.Fatalf("helper host did not report its plugin (%v): %q; stderr:\n%s", err, line, stderr.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid=")))
	if err != nil {
		t.Fatal(err)
	}
	if processGone(pid) {
		t.Fatalf("plugin %d not running before the host is killed", pid)
	}
	if files, _ := filepath.Glob(filepath.Join(shm, "*.shm")); len(files) != 1 {
		t.Fatalf("allocation files before the kill: %v", files)
	}
	if err := host.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()
	eventually(t, 10*time.Second, "plugin "+strconv.Itoa(pid)+" outlived its SIGKILLed host", func() bool { return processGone(pid) })
	eventually(t, 10*time.Second, "the plugin's allocation files outlived its host", func() bool {
		files, _ := filepath.Glob(filepath.Join(shm, "*.shm"))
		return len(files) == 0
	})
	// The killed host could not remove its socket folder; the next start
	// on the same base does.
	stale := filepath.Join(sockets, socketDirPrefix+strconv.Itoa(host.Process.Pid)+"-*")
	if m, _ := filepath.Glob(stale); len(m) != 1 {
		t.Fatalf("socket folders of the killed host: %v, want the one it left", m)
	}
	p, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger(),
		Env: mockEnv(shm), SocketDir: sockets})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if m, _ := filepath.Glob(stale); len(m) != 0 {
		t.Fatalf("socket folder of the dead host still there after the next start: %v", m)
	}
	if m, _ := filepath.Glob(filepath.Join(sockets, "*")); len(m) != 0 {
		t.Fatalf("socket folders left after Close: %v", m)
	}
}

func TestPluginConfigErrorReachesTheHost(t *testing.T) {
	_, err := Start(t.Context(), "mock", Options{PluginDir: testPlugins(), Logger: hclog.NewNullLogger(),
		Env: mockEnv(filepath.Join(t.TempDir(), "shm"), "WCACHE_MOCK_MEMORY=lots")})
	var xe *ExitError
	if !errors.As(err, &xe) || !strings.Contains(err.Error(), `WCACHE_MOCK_MEMORY="lots"`) || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("Start with a bad mock setting = %v, want *ExitError with the plugin's explanation and exit status", err)
	}
}

// TestPluginSurvivesThreadChurn makes the Go runtime destroy OS threads
// after the plugin started: goroutines that lock their thread and end
// without unlocking take the thread with them. Were the plugin forked from
// one of those pooled threads, its Pdeathsig would kill it. pluginhost forks
// from a thread its own goroutine holds, locked, for the plugin's life.
func TestPluginSurvivesThreadChurn(t *testing.T) {
	p := startMock(t, filepath.Join(t.TempDir(), "shm"))
	for range 200 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
		}()
		<-done
	}
	// A Pdeathsig from a destroyed thread would be delivered at once; give
	// the process a moment to be reaped before checking.
	select {
	case <-p.Exited():
		t.Fatalf("the plugin died with a destroyed thread: %v", p.ExitError())
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := p.Backend().Devices(t.Context()); err != nil {
		t.Fatalf("Devices: %v", err)
	}
}

// TestLoadWithManyExtents sends a Load request larger than gRPC's default
// 4 MiB message limit: a checkpoint with very many tensors must load.
func TestLoadWithManyExtents(t *testing.T) {
	p := startMock(t, filepath.Join(t.TempDir(), "shm"))
	b := p.Backend()
	ctx := t.Context()
	const n = 60_000
	dir := filepath.Join(t.TempDir(), strings.Repeat("long-folder-name-", 4))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "model-00001-of-00001.safetensors")
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(weights, data, 0o644); err != nil {
		t.Fatal(err)
	}
	extents := make([]sdk.Extent, n)
	for i := range extents {
		// Reverse order, one byte each.
		extents[i] = sdk.Extent{Path: weights, FileOffset: uint64(i), Length: 1, DestOffset: uint64(n - 1 - i)}
	}
	id, _, err := b.Allocate(ctx, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Load(ctx, id, extents, nil); err != nil {
		t.Fatalf("Load of %d extents: %v", n, err)
	}
	got, err := b.Read(ctx, id, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got[n-1-i] != data[i] {
			t.Fatalf("byte %d: got %d, want %d", n-1-i, got[n-1-i], data[i])
		}
	}
}

// TestReplacedBinaryIsRefusedOnRestart: a restart given the BinaryID of
// the first start runs the same file again, refuses a binary replaced at
// the same path (*ReplacedError), and accepts the new one only when a
// SHA-256 pin vouches for it.
func TestReplacedBinaryIsRefusedOnRestart(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "wcache-backend-mock")
	data, err := os.ReadFile(filepath.Join(testPlugins(), "wcache-backend-mock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	shm := filepath.Join(t.TempDir(), "shm")
	opts := Options{PluginDir: dir, Env: mockEnv(shm), Logger: hclog.NewNullLogger()}
	first, err := Start(t.Context(), "mock", opts)
	if err != nil {
		t.Fatal(err)
	}
	id := first.Binary()
	first.Close()
	opts.Binary = &id
	same, err := Start(t.Context(), "mock", opts)
	if err != nil {
		t.Fatalf("restart of the same file: %v", err)
	}
	same.Close()

	// Another binary (the same bytes plus one) renamed over the first.
	tmp := bin + ".new"
	if err := os.WriteFile(tmp, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	_, err = Start(t.Context(), "mock", opts)
	var re *ReplacedError
	if !errors.Is(err, ErrPluginReplaced) || !errors.As(err, &re) || re.Path != bin {
		t.Fatalf("restart of a replaced binary: %v, want *ReplacedError naming %s", err, bin)
	}
	sum := sha256.Sum256(append(data, 0))
	opts.SHA256 = hex.EncodeToString(sum[:])
	pinned, err := Start(t.Context(), "mock", opts)
	if err != nil {
		t.Fatalf("restart of a replaced binary pinned by --plugin-sha256: %v", err)
	}
	pinned.Close()
}
