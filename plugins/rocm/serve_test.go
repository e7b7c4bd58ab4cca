package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/plugins/rocm/internal/fakes"
)

// world is one end-to-end test's private setup: the wcache binary, a
// short runtime folder (socket paths are limited to 107 bytes), a
// checkpoint, and the environment every wcache process gets.
type world struct {
	t      *testing.T
	wcache string
	model  string
	env    []string
}

func newWorld(t *testing.T, extra ...string) *world {
	t.Helper()
	if fakes.Real(os.Getenv) {
		t.Skip("the end-to-end tests run on the fakes")
	}
	dir := t.TempDir()
	w := &world{t: t, wcache: filepath.Join(dir, "wcache"), model: filepath.Join(dir, "model")}
	build := exec.Command("go", "build", "-o", w.wcache, "github.com/wcache/wcache/cmd/wcache")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building wcache: %v\n%s", err, out)
	}
	writeSafetensors(t, filepath.Join(w.model, "model.safetensors"), 3<<20+12)
	run, err := os.MkdirTemp("", "wc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	w.env = append(append(os.Environ(), "XDG_RUNTIME_DIR="+run), pluginEnv(t, "", extra...)...)
	return w
}

// backendArgs select the rocm plugin built by TestMain.
func backendArgs() []string {
	return []string{"--backend", "rocm", "--plugin-dir", os.Getenv(pluginsEnv)}
}

// run runs wcache to completion and returns its exit code and output.
func (w *world) run(args ...string) (int, string, string) {
	w.t.Helper()
	cmd := exec.Command(w.wcache, args...)
	cmd.Env = w.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		w.t.Fatalf("wcache %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// daemon is a long-running wcache process (serve or launch).
type daemon struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer // stdout lines seen so far
	stderr bytes.Buffer
	lines  chan string
	done   chan error
}

// start starts wcache and waits until a stdout line contains ready.
func (w *world) start(ready string, args ...string) *daemon {
	w.t.Helper()
	d := &daemon{cmd: exec.Command(w.wcache, args...), lines: make(chan string, 64), done: make(chan error, 1)}
	d.cmd.Env = w.env
	d.cmd.Stderr = &syncWriter{mu: &d.mu, b: &d.stderr}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.lines <- sc.Text():
			default:
			}
		}
		d.done <- d.cmd.Wait()
		close(d.lines)
	}()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case line, ok := <-d.lines:
			if !ok {
				w.t.Fatalf("wcache %v ended before %q:\n%s", args, ready, d.output())
			}
			if strings.Contains(line, ready) {
				return d
			}
		case <-deadline:
			w.t.Fatalf("wcache %v: no %q after 90 s:\n%s", args, ready, d.output())
		}
	}
}

func (d *daemon) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String() + d.stderr.String()
}

// stop sends SIGTERM and returns the exit code.
func (d *daemon) stop(t *testing.T) int {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range d.lines {
	}
	select {
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:\n%s", d.output())
	default:
	}
	return d.cmd.ProcessState.ExitCode()
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// attachSummary is what `wcache attach --json` prints.
type attachSummary struct {
	DeviceUUID string `json:"device_uuid"`
	Tensors    int    `json:"tensors"`
	Verified   bool   `json:"verified"`
}

func (w *world) attachVerify(gpu int, extra ...string) attachSummary {
	w.t.Helper()
	args := append(append([]string{"attach"}, backendArgs()...), "--gpu-id", fmt.Sprint(gpu), "--model", w.model, "--verify", "--json")
	code, stdout, stderr := w.run(append(args, extra...)...)
	var sum attachSummary
	if code != 0 || json.Unmarshal([]byte(stdout), &sum) != nil {
		w.t.Fatalf("attach --verify on GPU %d: exit %d\n%s\n%s", gpu, code, stdout, stderr)
	}
	return sum
}

// TestServeThenAttachVerify runs the real `wcache serve --backend rocm`
// on the fake HIP: it loads the checkpoint through the fill pipeline and
// exports hip-ipc handles; `wcache attach --verify` (another process, with
// its own plugin) imports them with hipIpcOpenMemHandle and compares every
// tensor's SHA-256 with the file. Then the daemon stops cleanly on SIGTERM.
func TestServeThenAttachVerify(t *testing.T) {
	w := newWorld(t)
	args := append(append([]string{"serve"}, backendArgs()...), "--gpu-id", "1", "--model", w.model)
	d := w.start("serving ", args...)
	sum := w.attachVerify(1)
	if sum.DeviceUUID != "GPU-2b6c1e0f7d3a9c55" || !sum.Verified || sum.Tensors != 1 {
		t.Fatalf("attach = %+v, want GPU-2b6c1e0f7d3a9c55 verified", sum)
	}
	code, stdout, stderr := w.run(append(append([]string{"devices"}, backendArgs()...), "--json")...)
	if code != 0 || !strings.Contains(stdout, "GPU-1901ead3a2ecd4a6") || !strings.Contains(stdout, "fake amdsmi") {
		t.Fatalf("devices: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, d.output())
	}
}

// TestLaunchTP2ThenAttachEachRank launches one daemon per GPU for TP=2 and
// verifies each rank's tensors from another process.
func TestLaunchTP2ThenAttachEachRank(t *testing.T) {
	w := newWorld(t)
	args := append(append([]string{"launch"}, backendArgs()...), "--model", w.model, "--tp-size", "2", "--replicate",
		"--timeout", "60s", "--drain-timeout", "5s", "--stop-grace", "15s")
	d := w.start("2 daemons ready", args...)
	for rank, want := range []string{"GPU-1901ead3a2ecd4a6", "GPU-2b6c1e0f7d3a9c55"} {
		sum := w.attachVerify(rank, "--tp-size", "2", "--tp-rank", fmt.Sprint(rank))
		if sum.DeviceUUID != want || !sum.Verified {
			t.Errorf("rank %d: attach = %+v, want %s verified", rank, sum, want)
		}
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("launch exited %d after SIGTERM:\n%s", code, d.output())
	}
}

// TestPublishThenAttachVerify: an empty rocm daemon run with
// --verify-publish hands out writable hip-ipc handles; `wcache publish
// --gpu-id` fills them through its own rocm plugin (which opens them with
// hipIpcOpenMemHandle and loads the files into them) and sends SHA-256s the
// daemon checks on the device; `wcache attach --verify` then finds every
// byte of the files. Without a backend (--device-uuid) publish says why it
// cannot fill hip-ipc handles.
func TestPublishThenAttachVerify(t *testing.T) {
	w := newWorld(t)
	d := w.start("serving ", append(append([]string{"serve"}, backendArgs()...), "--gpu-id", "0", "--verify-publish")...)
	code, stdout, stderr := w.run("publish", "--device-uuid", "GPU-1901ead3a2ecd4a6", "--model", w.model, "--sha256")
	if code != 1 || !strings.Contains(stderr, "hip-ipc") || !strings.Contains(stderr, "--gpu-id") {
		t.Fatalf("publish without a backend: exit %d, want 1 naming hip-ipc and --gpu-id\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = w.run(append(append([]string{"publish"}, backendArgs()...), "--gpu-id", "0", "--model", w.model, "--sha256")...)
	if code != 0 || !strings.Contains(stdout, "published 1 tensors") || !strings.Contains(stdout, "verified by the daemon") {
		t.Fatalf("publish through the backend: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if sum := w.attachVerify(0); sum.DeviceUUID != "GPU-1901ead3a2ecd4a6" || !sum.Verified || sum.Tensors != 1 {
		t.Fatalf("attach after publish = %+v", sum)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, d.output())
	}
}

// TestServeStopsWithTheFatalReason injects a fatal HIP error (700) once the
// daemon serves and is idle (only the health probe calls HIP): serve must
// exit non-zero naming the plugin's exit and the HIP error.
func TestServeStopsWithTheFatalReason(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "fatal")
	w := newWorld(t, "FAKEHIP_STICKY_FILE="+trigger, "WCACHE_ROCM_HEALTH_INTERVAL=200ms")
	d := w.start("serving ", append(append([]string{"serve"}, backendArgs()...), "--gpu-id", "0", "--model", w.model)...)
	if err := os.WriteFile(trigger, []byte("700"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range d.lines {
	}
	err := <-d.done
	d.done <- err
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("serve ended with %v, want a non-zero exit:\n%s", err, d.output())
	}
	for _, want := range []string{"backend plugin exited", "exit status 3", "fatal error", "hipErrorIllegalAddress (700)"} {
		if !strings.Contains(d.output(), want) {
			t.Errorf("serve's output does not name %q:\n%s", want, d.output())
		}
	}
}

// writeSafetensors writes one F32 tensor of n bytes.
func writeSafetensors(t *testing.T, path string, n int) {
	t.Helper()
	header, err := json.Marshal(map[string]any{
		"w": map[string]any{"dtype": "F32", "shape": []int{n / 4}, "data_offsets": []int{0, n}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	for i := 0; i < n; i++ {
		b.WriteByte(byte(i * 7))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
