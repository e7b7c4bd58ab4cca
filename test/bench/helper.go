package bench

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/test/testproc"
)

// HelperCommand is the hidden subcommand of the bench binary that runs one
// measurement in a fresh process: `wcache-bench helper <mode> [flags]`.
const HelperCommand = "helper"

// Helper modes.
const (
	// helperReadFiles parses every header and reads every tensor into its
	// own heap buffer, the way a safetensors loader does.
	helperReadFiles = "read-files"
	// helperAttach attaches to the daemon of a device (discovery by UUID
	// through the environment's layout), maps every handle
	// read-only and builds one slice per tensor.
	helperAttach = "attach"
)

// HelperResult is what a helper (Go or Python) prints on stdout as one
// JSON object: WorkNS from the start of the work (after process start)
// until every tensor was usable, split into Steps (and, for attach touch,
// step "touch" after it: the time to then read a byte of every 4 KiB page,
// the first-touch faults a loader's read already paid); Checksum of the
// bytes touched, so that no read is elided. Wall is set by the parent
// (fresh).
type HelperResult struct {
	WorkNS   int64             `json:"work_ns"`
	Tensors  int               `json:"tensors"`
	Bytes    uint64            `json:"bytes"`
	Checksum uint64            `json:"checksum,omitempty"`
	Steps    map[string]int64  `json:"steps,omitempty"`
	Versions map[string]string `json:"versions,omitempty"`
	Wall     time.Duration     `json:"-"`
}

// RunHelper runs a helper — "read-files DIR", or "attach DIR DEVICE_UUID
// DEVICE_CAPABILITY [touch]" — and writes its HelperResult to stdout. It
// is what `wcache-bench helper …` executes.
func RunHelper(ctx context.Context, args []string, stdout io.Writer) error {
	start := time.Now()
	var res HelperResult
	var err error
	switch {
	case len(args) == 2 && args[0] == helperReadFiles:
		res, err = readFiles(args[1], start)
	case len(args) >= 4 && args[0] == helperAttach:
		res, err = attachAndMap(ctx, args[1], args[2], args[3], len(args) > 4 && args[4] == "touch", start)
	default:
		return fmt.Errorf("helper %q: want %s DIR, or %s DIR DEVICE_UUID DEVICE_CAPABILITY [touch]", args, helperReadFiles, helperAttach)
	}
	if err == nil {
		err = json.NewEncoder(stdout).Encode(res)
	}
	return err
}

// readFiles is the loader path: parse the headers, then read every tensor
// into a buffer of its own.
func readFiles(dir string, start time.Time) (HelperResult, error) {
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return HelperResult{}, err
	}
	headers := time.Since(start)
	tensors := make(map[string][]byte, ck.NumTensors())
	var total uint64
	for _, f := range ck.Files {
		fh, err := os.Open(f.Path)
		for _, t := range f.Header.Tensors {
			buf := make([]byte, t.Len())
			if err == nil {
				_, err = fh.ReadAt(buf, f.Offset(t))
			}
			tensors[t.Name], total = buf, total+t.Len()
		}
		if fh != nil {
			fh.Close()
		}
		if err != nil {
			return HelperResult{}, fmt.Errorf("read %s: %w", f.Path, err)
		}
	}
	work := time.Since(start)
	var sum uint64
	for _, b := range tensors {
		if len(b) > 0 {
			sum += uint64(b[0]) + uint64(b[len(b)-1])
		}
	}
	return HelperResult{WorkNS: int64(work), Tensors: len(tensors), Bytes: total, Checksum: sum,
		Steps: map[string]int64{"headers": int64(headers), "read": int64(work - headers)}}, nil
}

// attachAndMap is the wcache path: compute the config the way an engine
// does (checkpoint digest from the headers), attach by device UUID, map
// every handle and slice every tensor.
func attachAndMap(ctx context.Context, dir, uuid, capability string, touch bool, start time.Time) (HelperResult, error) {
	cfg, err := testproc.EngineConfig(dir, capability)
	if err != nil {
		return HelperResult{}, err
	}
	digested := time.Since(start)
	layout, err := paths.NewLayout(paths.Options{})
	if err != nil {
		return HelperResult{}, err
	}
	att, err := client.Attach(ctx, client.ByDeviceUUID(layout, uuid), cfg, client.Options{ClientName: "wcache-bench helper"})
	if err != nil {
		return HelperResult{}, err
	}
	defer att.Lease.Close()
	attached := time.Since(start)
	mapped, err := client.Map(att.Manifest)
	if err != nil {
		return HelperResult{}, err
	}
	defer mapped.Close()
	tensors := make(map[string][]byte, mapped.Len())
	for _, t := range mapped.All() {
		tensors[t.Name] = t.Data
	}
	work := time.Since(start)
	res := HelperResult{WorkNS: int64(work), Tensors: len(tensors), Bytes: att.Manifest.Bytes(),
		Steps: map[string]int64{"digest": int64(digested), "attach": int64(attached - digested), "map": int64(work - attached)}}
	if touch {
		t0 := time.Now()
		var sum uint64
		for _, b := range tensors {
			for i := 0; i < len(b); i += pageSize {
				sum += uint64(b[i])
			}
		}
		res.Steps["touch"], res.Checksum = int64(time.Since(t0)), sum
	}
	return res, nil
}

// Fresh processes, run to completion: this binary re-executed as
// `wcache-bench helper …` and the embedded Python scripts (python3 -c).

// Embedded Python helpers.
var (
	//go:embed py/read_numpy.py
	pyReadNumpy string
	//go:embed py/attach_torch.py
	pyAttachTorch string
	//go:embed py/identity_step.py
	pyIdentityStep string
)

// pythonArgv is a fresh Python process running source with args.
func (w *world) pythonArgv(source string, args ...string) []string {
	return append([]string{w.o.Python, "-c", source}, args...)
}

// helperArgv is a fresh Go process running the helper mode with args.
func (w *world) helperArgv(mode string, args ...string) []string {
	return append(append(append([]string{}, w.o.HelperArgv...), mode), args...)
}

// fresh runs argv to completion (run) and decodes the HelperResult it
// prints last on stdout; Wall is the whole process, from fork/exec to
// exit, as its parent saw it.
func (w *world) fresh(argv ...string) (HelperResult, error) {
	res, err := w.run(argv[0], argv[1:]...)
	if err != nil {
		return HelperResult{}, err
	}
	out := strings.TrimSpace(res.Stdout)
	out = out[strings.LastIndexByte(out, '\n')+1:]
	var r HelperResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return HelperResult{}, fmt.Errorf("%s: result %q: %w", filepath.Base(argv[0]), out, err)
	}
	r.Wall = res.Wall
	return r, nil
}

// run runs path with args to completion (readyTimeout at most) in the
// world's environment; an exit status other than 0 is an error with the
// end of stderr.
func (w *world) run(path string, args ...string) (testproc.Result, error) {
	res, err := testproc.NewGroup(testproc.Options{}).Run(readyTimeout,
		testproc.Options{Path: path, Args: args, Env: w.Env(w.o.HelperEnv...)})
	if err == nil && res.Code != 0 {
		err = fmt.Errorf("%s: exit %d\n%s", filepath.Base(path), res.Code, tail(res.Stderr))
	}
	return res, err
}

// tail is the last 3000 bytes of s.
func tail(s string) string {
	const n = 3000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
