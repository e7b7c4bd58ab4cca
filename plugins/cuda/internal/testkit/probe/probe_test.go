package probe

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/internal/testkit/fakelib"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
)

// libDirEnv names the folder of the fakes TestMain builds.
const libDirEnv = "WCACHE_PROBE_TEST_LIBS"

// helperEnv makes the test binary run the probe command itself.
const helperEnv = "WCACHE_PROBE_TEST_HELPER"

func TestMain(m *testing.M) {
	os.Exit(gputest.Main(m, gputest.MainOptions{
		Name: "probe", HelperEnv: helperEnv,
		Helper: func() int { return Run(os.Args[len(os.Args)-3:], os.Stdin, os.Stdout, os.Stderr, os.Getenv) },
		Build: func(dir string) error {
			_, err := fakelib.CUDA(filepath.Join("..", "..", ".."), dir, "")
			return err
		},
		LibDirEnv: libDirEnv,
		Env:       map[string]string{"FAKECUDA_DEVICES": "1"},
	}))
}

// writeCheckpoint writes a safetensors file of two tensors (a BF16 3x1000
// and an F32 77) of bytes derived from seed, and returns its path and its
// data buffer.
func writeCheckpoint(t *testing.T, name string, seed uint64) (string, []byte) {
	t.Helper()
	data := make([]byte, 3*1000*2+77*4)
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	_, _ = rand.NewChaCha8(key).Read(data)
	header := fmt.Sprintf(`{"w":{"dtype":"BF16","shape":[3,1000],"data_offsets":[0,6000]},`+
		`"b":{"dtype":"F32","shape":[77],"data_offsets":[6000,%d]}}`, len(data))
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	file = append(append(file, header...), data...)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestDataStartRefusesWhatIsNotSafetensors(t *testing.T) {
	path, data := writeCheckpoint(t, "m.safetensors", 2)
	start, size, err := dataStart(path)
	if err != nil || size-start != int64(len(data)) {
		t.Fatalf("dataStart = %d, %d, %v; want a %d-byte data buffer", start, size, err, len(data))
	}
	dir := t.TempDir()
	for name, content := range map[string][]byte{
		"short":    {1, 2, 3},
		"too long": binary.LittleEndian.AppendUint64(nil, 1<<40),
		"not json": append(binary.LittleEndian.AppendUint64(nil, 4), "abcd"...),
		"past end": append(binary.LittleEndian.AppendUint64(nil, 64), "{}"...),
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := dataStart(p); err == nil || !strings.Contains(err.Error(), "not a safetensors file") {
			t.Errorf("%s: dataStart = %v, want \"not a safetensors file\"", name, err)
		}
	}
}

// TestProbeHandleOpensInAnotherProcess runs the probe as a child process
// and opens its handle here, as the GPU check's PyTorch process does.
func TestProbeHandleOpensInAnotherProcess(t *testing.T) {
	lib := filepath.Join(os.Getenv(libDirEnv), "libcuda.so.1")
	p1, d1 := writeCheckpoint(t, "model-00001-of-00002.safetensors", 1)
	p2, d2 := writeCheckpoint(t, "model-00002-of-00002.safetensors", 7)
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--gpu-id=0", p1, p2)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "WCACHE_CUDA_LIBRARY="+lib, "WCACHE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, stdout := childproc.StartPiped(t, cmd)
	line, err := stdout.ReadBytes('\n')
	if err != nil {
		t.Fatalf("probe printed no report: %v\n%s", err, stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(line, &rep); err != nil {
		t.Fatalf("report %q: %v", line, err)
	}
	if rep.HandleKind != "cuda-ipc" || len(rep.Handle) != 64 || len(rep.Files) != 2 || rep.Bytes != uint64(len(d1)+len(d2)) || rep.LoadSeconds <= 0 {
		t.Fatalf("report = %+v", rep)
	}
	if rep.Files[1].DestOffset%Alignment != 0 || rep.Files[1].DestOffset < uint64(len(d1)) {
		t.Fatalf("second file at %d: not aligned after the first", rep.Files[1].DestOffset)
	}
	got := openAndRead(t, lib, rep)
	for i, want := range [][]byte{d1, d2} {
		f := rep.Files[i]
		if !bytes.Equal(got[f.DestOffset:f.DestOffset+f.Length], want) {
			t.Fatalf("file %d: bytes through the handle differ from the file's data", i)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("probe after stdin closed: %v\n%s", err, stderr.String())
	}
}

// openAndRead opens the report's handle with the driver in this process
// and copies the whole allocation out.
func openAndRead(t *testing.T, lib string, rep Report) []byte {
	t.Helper()
	p, err := fakelib.Copy(lib, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, err := driver.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := d.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.PrimaryCtxRelease(0)
	if err := d.CtxSetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.CtxSetCurrent(driver.Context{})
	var h driver.IPCHandle
	copy(h[:], rep.Handle)
	ptr, err := d.IpcOpenMemHandle(h, driver.IPCMemLazyEnablePeer)
	if err != nil {
		t.Fatal(err)
	}
	defer d.IpcCloseMemHandle(ptr)
	out := make([]byte, rep.Size)
	if err := d.MemcpyDtoH(out, ptr); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProbeUsageAndErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Run(nil, strings.NewReader(""), &out, &errOut, func(string) string { return "" }); code != 2 || !strings.Contains(errOut.String(), "usage") {
		t.Fatalf("no arguments: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	env := func(k string) string {
		if k == "WCACHE_CUDA_LIBRARY" {
			return "/nonexistent/libcuda.so.1"
		}
		return ""
	}
	path, _ := writeCheckpoint(t, "m.safetensors", 3)
	if code := Run([]string{path}, strings.NewReader(""), &out, &errOut, env); code != 1 || !strings.Contains(errOut.String(), "backend unavailable: cannot load /nonexistent/libcuda.so.1") {
		t.Fatalf("missing driver: exit %d, stderr %q", code, errOut.String())
	}
	if out.Len() != 0 {
		t.Fatalf("stdout %q on failure", out.String())
	}
}
