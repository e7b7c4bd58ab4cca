package gputest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// World is one end-to-end test's private setup for a GPU backend: the
// wcache binary (built by NewWorld), a short runtime folder (socket paths
// are limited to 107 bytes), a checkpoint of one tensor, and the
// environment every wcache process gets.
type World struct {
	T         *testing.T
	Wcache    string
	Model     string
	Env       []string
	Backend   string // --backend
	PluginDir string // --plugin-dir
}

// NewWorld builds wcache, writes a checkpoint of modelBytes (one F32
// tensor) and returns a World whose processes get env on top of the test
// process's environment.
func NewWorld(t *testing.T, backend, pluginDir string, modelBytes int, env []string) *World {
	t.Helper()
	dir := t.TempDir()
	w := &World{T: t, Wcache: filepath.Join(dir, "wcache"), Model: filepath.Join(dir, "model"), Backend: backend, PluginDir: pluginDir}
	build := exec.Command("go", "build", "-o", w.Wcache, "github.com/wcache/wcache/cmd/wcache")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building wcache: %v\n%s", err, out)
	}
	WriteSafetensors(t, filepath.Join(w.Model, "model.safetensors"), modelBytes)
	run, err := os.MkdirTemp("", "wc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	w.Env = append(append(os.Environ(), "XDG_RUNTIME_DIR="+run), env...)
	return w
}

// BackendArgs select the World's backend plugin.
func (w *World) BackendArgs() []string {
	return []string{"--backend", w.Backend, "--plugin-dir", w.PluginDir}
}

// Run runs wcache to completion and returns its exit code and output.
func (w *World) Run(args ...string) (int, string, string) {
	w.T.Helper()
	cmd := exec.Command(w.Wcache, args...)
	cmd.Env = w.Env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		w.T.Fatalf("wcache %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// Daemon is a long-running wcache process (serve or launch).
type Daemon struct {
	Cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer // stdout lines seen so far
	stderr bytes.Buffer
	// Lines has the stdout lines not yet consumed; closed at exit.
	Lines chan string
	// Done receives the process's Wait result once (put it back to share).
	Done chan error
}

// Start starts wcache and waits until a stdout line contains ready. The
// process (and its process group) is killed at cleanup.
func (w *World) Start(ready string, args ...string) *Daemon {
	w.T.Helper()
	d := &Daemon{Cmd: exec.Command(w.Wcache, args...), Lines: make(chan string, 64), Done: make(chan error, 1)}
	d.Cmd.Env = w.Env
	d.Cmd.Stderr = &syncWriter{mu: &d.mu, b: &d.stderr}
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := d.Cmd.StdoutPipe()
	if err != nil {
		w.T.Fatal(err)
	}
	if err := d.Cmd.Start(); err != nil {
		w.T.Fatal(err)
	}
	w.T.Cleanup(func() {
		_ = syscall.Kill(-d.Cmd.Process.Pid, syscall.SIGKILL)
		<-d.Done
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.Lines <- sc.Text():
			default:
			}
		}
		d.Done <- d.Cmd.Wait()
		close(d.Lines)
	}()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case line, ok := <-d.Lines:
			if !ok {
				w.T.Fatalf("wcache %v ended before %q:\n%s", args, ready, d.Output())
			}
			if strings.Contains(line, ready) {
				return d
			}
		case <-deadline:
			w.T.Fatalf("wcache %v: no %q after 90 s:\n%s", args, ready, d.Output())
		}
	}
}

// Output is the daemon's stdout so far followed by its stderr.
func (d *Daemon) Output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String() + d.stderr.String()
}

// Stop sends SIGTERM and returns the exit code.
func (d *Daemon) Stop(t *testing.T) int {
	t.Helper()
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range d.Lines {
	}
	select {
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:\n%s", d.Output())
	default:
	}
	return d.Cmd.ProcessState.ExitCode()
}

// PluginPID returns the pid of the daemon's backend plugin (a child
// process whose name starts with wcache-backend-), 0 when it has none.
func (d *Daemon) PluginPID() int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			continue // exited meanwhile
		}
		// The fields after the command name: state, ppid, …
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(d.Cmd.Process.Pid) {
			continue
		}
		if comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); bytes.HasPrefix(comm, []byte("wcache-backend-")) {
			return pid
		}
	}
	return 0
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

// AttachSummary is what `wcache attach --json` prints.
type AttachSummary struct {
	DeviceUUID string `json:"device_uuid"`
	Tensors    int    `json:"tensors"`
	Verified   bool   `json:"verified"`
}

// AttachVerify runs `wcache attach --verify --json` for the World's model
// on gpu and fails the test unless it succeeds.
func (w *World) AttachVerify(gpu int, extra ...string) AttachSummary {
	w.T.Helper()
	args := append(append([]string{"attach"}, w.BackendArgs()...), "--gpu-id", strconv.Itoa(gpu), "--model", w.Model, "--verify", "--json")
	code, stdout, stderr := w.Run(append(args, extra...)...)
	var sum AttachSummary
	if code != 0 || json.Unmarshal([]byte(stdout), &sum) != nil {
		w.T.Fatalf("attach --verify on GPU %d: exit %d\n%s\n%s", gpu, code, stdout, stderr)
	}
	return sum
}

// WriteSafetensors writes one F32 tensor "w" of n bytes (byte i is i*7).
func WriteSafetensors(t testing.TB, path string, n int) {
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
