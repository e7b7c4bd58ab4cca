package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tinyOptions runs every scenario on checkpoints of a few MiB, through the
// real binaries, in a few seconds.
func tinyOptions(t *testing.T) Options {
	t.Helper()
	out := t.TempDir()
	o, err := ParseOptions([]string{
		"-bin", os.Getenv(testBinEnv), "-repo", "../..",
		"-out-md", filepath.Join(out, "benchmarks.md"), "-out-json", filepath.Join(out, "benchmarks.json"),
		"-gib", "0.004", "-small-mib", "2", "-few-tensors", "30", "-many-tensors", "120",
		"-repeats", "1", "-attach-iters", "5", "-clients", "4", "-seconds", "0.3",
		"-cold=false", "-profile=false", "-tmpdir", t.TempDir(),
		"-only", "restart,attach,fill,concurrency,startup",
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	o.HelperArgv = []string{os.Args[0], HelperCommand}
	o.HelperEnv = []string{testHelperEnv + "=1"}
	o.Log = testWriter{t}
	return o
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// shmLeftovers lists the harness's shared-memory folders.
func shmLeftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wcache-bench-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRunEveryScenarioThroughTheRealBinaries(t *testing.T) {
	o := tinyOptions(t)
	before := shmLeftovers(t, o.ShmDir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(o.OutJSON); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(o.OutMarkdown); err != nil {
		t.Fatal(err)
	}

	if r.Commit.Hash == "" || r.Machine.Cores == 0 || r.Machine.GoVersion == "" || r.Machine.Kernel == "" {
		t.Errorf("machine/commit not filled: %+v %+v", r.Machine, r.Commit)
	}
	// Row 1: four variants, every tensor of the checkpoint each time.
	if r.Restart == nil || len(r.Restart.Variants) != 4 {
		t.Fatalf("restart: %+v", r.Restart)
	}
	for _, v := range r.Restart.Variants {
		if v.Work.N != 1 || v.Work.MedianMS <= 0 || v.Wall.MedianMS < v.Work.MedianMS {
			t.Errorf("restart %s: work %+v wall %+v", v.Name, v.Work, v.Wall)
		}
	}
	if r.Restart.GoWorkRatio <= 0 || r.Restart.PythonWorkRatio <= 0 || r.Machine.Python == "" {
		t.Errorf("restart ratios %v %v, python %q", r.Restart.GoWorkRatio, r.Restart.PythonWorkRatio, r.Machine.Python)
	}
	// Row 2: two pairs of manifests.
	if r.Attach == nil || len(r.Attach.Cases) != 4 || len(r.Attach.Flatness) != 2 {
		t.Fatalf("attach: %+v", r.Attach)
	}
	for _, c := range r.Attach.Cases {
		if c.Attach.N != 5 || c.Status.MedianMS <= 0 || c.ManifestBytes <= 0 {
			t.Errorf("attach case %d tensors: %+v", c.Model.Tensors, c)
		}
	}
	// Row 3: daemon-reported rate and baselines; cold skipped with a reason.
	if r.Fill == nil || r.Fill.Warm.DaemonGiBps <= 0 || r.Fill.Warm.SeqReadGiBps <= 0 || r.Fill.Warm.MemcpyGiBps <= 0 {
		t.Fatalf("fill: %+v", r.Fill)
	}
	if r.Fill.Cold != nil || !strings.Contains(r.Fill.ColdNote, "not measured") {
		t.Errorf("cold: %+v, note %q", r.Fill.Cold, r.Fill.ColdNote)
	}
	// Row 4: no errors, no lease left.
	if c := r.Concurrency; c == nil || c.Attaches == 0 || c.Errors != 0 || c.LeasesAfter != 0 {
		t.Fatalf("concurrency: %+v", r.Concurrency)
	}
	// Rows 5 and 6: both sizes; the weights are in the shared-memory files.
	if r.Footprint == nil || len(r.Footprint.Cases) != 2 || r.Startup == nil || len(r.Startup.Cases) != 2 {
		t.Fatalf("footprint %+v startup %+v", r.Footprint, r.Startup)
	}
	for _, c := range r.Footprint.Cases {
		if c.ShmFiles < c.Model.Bytes/2 || c.Steady["daemon"].RssAnon == 0 {
			t.Errorf("footprint %d MiB: shared-memory files hold %d bytes; %+v", c.Model.Bytes>>20, c.ShmFiles, c.Steady)
		}
	}
	for _, c := range r.Startup.Cases {
		if c.StartToReady.MedianMS <= c.Load.MedianMS || c.PhasesMS[phasePlugin] <= 0 {
			t.Errorf("startup %d MiB: %+v", c.Model.Bytes>>20, c)
		}
	}
	if r.GPU.Measured || !strings.Contains(r.GPU.Note, "not measured") {
		t.Errorf("GPU row: %+v", r.GPU)
	}
	// Every missed target has a finding.
	missed := 0
	for _, c := range r.Checks {
		if !c.Met {
			missed++
		}
	}
	if missed != len(r.Findings) {
		t.Errorf("%d missed checks, %d findings", missed, len(r.Findings))
	}

	// The files: JSON that decodes to the same report, Markdown with every row.
	b, err := os.ReadFile(o.OutJSON)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Commit != r.Commit || len(back.Checks) != len(r.Checks) {
		t.Errorf("JSON round trip: %+v", back.Commit)
	}
	md, err := os.ReadFile(o.OutMarkdown)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Machine and commit", r.Commit.Hash, "## 1. Restart", "## 2. Attach latency",
		"## 3. Fill rate", "## 4. Concurrency", "## 5. Footprint", "## 6. Start-up overhead", "## 7. GPU rows", "not measured"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	// The Markdown is a function of the JSON: -render-only reproduces it.
	rerendered := filepath.Join(t.TempDir(), "again.md")
	if code := Main([]string{"-render-only", "-out-json", o.OutJSON, "-out-md", rerendered}, &strings.Builder{}, testWriter{t}); code != 0 {
		t.Fatalf("-render-only exited %d", code)
	}
	if again, err := os.ReadFile(rerendered); err != nil || string(again) != string(md) {
		t.Errorf("-render-only gave a different Markdown (err %v)", err)
	}

	// Nothing left behind: shared memory and checkpoints.
	if after := shmLeftovers(t, o.ShmDir); !slices.Equal(after, before) {
		t.Errorf("shared-memory folders left behind: %v (before: %v)", after, before)
	}
	if left, _ := filepath.Glob(filepath.Join(o.TmpDir, "wcache-bench-models-*")); len(left) > 0 {
		t.Errorf("checkpoints left behind: %v", left)
	}
}
