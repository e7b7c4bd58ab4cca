package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/test/benchreport"
)

// tinyOptions runs scenarios on checkpoints of a few MiB, through the real
// binaries TestMain built, in a few seconds, with shared-memory folders in
// a private parent (another run on the machine cannot make them look leaked).
func tinyOptions(t *testing.T) Options {
	t.Helper()
	o, err := ParseOptions([]string{
		"-bin", os.Getenv(testBinEnv), "-repo", "../..", "-out", t.TempDir(),
		"-gib", "0.004", "-small-mib", "2", "-few-tensors", "30", "-many-tensors", "120",
		"-repeats", "1", "-attach-iters", "5", "-clients", "4", "-seconds", "0.3", "-hash-mib", "3", "-identity-tensors", "120",
		"-cold=false", "-tmpdir", t.TempDir(), "-shmdir", shmTestDir(t), "-only", "restart,fill,publish,pipeline,attach,concurrency,startup,takeover,content,generations,peer,peerfill,baseline",
		"-baseline", os.Getenv(testBinEnv), "-baseline-rev", "test",
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

// TestRunThroughTheRealBinaries runs every scenario but the Go
// micro-benchmarks end to end, renders the docs from the report, and
// checks that the run left no shared memory behind.
func TestRunThroughTheRealBinaries(t *testing.T) {
	o := tinyOptions(t)
	before, _ := filepath.Glob(filepath.Join(o.ShmDir, "wcache-bench-*"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Commit.Hash == "" || r.Machine.Cores == 0 {
		t.Errorf("machine/commit not filled: %+v %+v", r.Machine, r.Commit)
	}
	restart := r.Results["restart"].(*RestartResult)
	if len(restart.Variants) != 4 {
		t.Errorf("restart: %d variants, want 4", len(restart.Variants))
	}
	for _, v := range restart.Variants {
		if work, wall := v.Times["work"], v.Times["wall"]; work.N != 1 || work.MedianMS <= 0 || wall.MedianMS < work.MedianMS {
			t.Errorf("restart %s: work %+v wall %+v", v.Name, work, wall)
		}
	}
	fill := r.Results["fill"].(*FillResult)
	w := fill.Warm
	if w.Times["load"].N != 1 || w.Rates["daemon"] <= 0 || w.Rates["seq_read"] <= 0 || w.Rates["memcpy"] <= 0 || w.Ratios["daemon"] <= 0 ||
		w.Probes["memcpy"] == nil || w.Probes["pattern"] == nil || w.Times["load"].MedianMS <= 0 || w.Times["allocate"].MedianMS <= 0 {
		t.Errorf("fill warm: %+v", w)
	}
	if fill.Cold != nil || !strings.Contains(fill.ColdNote, "-cold=false") {
		t.Errorf("cold fill ran although disabled: %q", fill.ColdNote)
	}
	pub := r.Results["publish"].(*PublishResult)
	if len(pub.Samples["publish"]) != 1 || pub.Rates["publish"] <= 0 || pub.Rates["fill"] < pub.Rates["publish"] || pub.Rates["fresh_memcpy"] <= 0 ||
		pub.Ratios["publish"] <= 0 || pub.Times["attach"].N != publishAttachIters {
		t.Errorf("publish: %+v", pub)
	}
	pipe := r.Results["pipeline"].(*PipelineResult)
	if _, err := os.Stat(filepath.Join(os.Getenv(testBinEnv), cudaPlugin)); err == nil {
		r := pipe.Rates
		if pipe.NotMeasured != "" || r["read_1"] <= 0 || r["read_n"] <= 0 || r["fill_1"] <= 0 ||
			r["fill_n"] <= 0 || r["paced"] <= 0 || pipe.CopyGiBps <= 0 || pipe.Ratios["paced"] <= 0 ||
			r["paced"] > pipe.CopyGiBps*1.2 {
			t.Errorf("pipeline: %+v", pipe)
		}
	} else if pipe.NotMeasured == "" {
		t.Errorf("pipeline without the CUDA plugin does not say why it measured nothing: %+v", pipe)
	}
	attach := r.Results["attach"].(*AttachResult)
	if len(attach.Cases) != 4 || len(attach.Flatness) != 2 {
		t.Errorf("attach: %+v", attach)
	}
	for _, c := range attach.Cases {
		if c.Times["attach"].N != o.AttachIters || c.Times["attach"].MedianMS <= 0 || c.Times["dial"].N != o.AttachIters {
			t.Errorf("attach %d tensors: %+v", c.Model.Tensors, c)
		}
	}
	conc := r.Results["concurrency"].(*ConcurrencyResult)
	if conc.Attaches == 0 || conc.Errors != 0 || conc.LeasesAfter != 0 || conc.Footprint.NonShared == 0 {
		t.Errorf("concurrency: %+v", conc)
	}
	startup := r.Results["startup"].(*StartupResult)
	if len(startup.Cases) != 2 {
		t.Fatalf("startup: %d cases, want 2", len(startup.Cases))
	}
	for _, c := range startup.Cases {
		p := func(k string) float64 { return c.Times[k].MedianMS }
		if p("start_to_ready") <= 0 || p("plan") <= 0 || p("load") <= 0 || p("daemon_total") < p("load") || p("outside_daemon") <= 0 ||
			c.NonSharedSteady == 0 || c.ShmFiles < c.Model.Bytes {
			t.Errorf("startup %d bytes: %+v", c.Model.Bytes, c)
		}
	}
	content := r.Results["content"].(*ContentResult)
	if content.Ratios["fill"] <= 0 || content.Ratios["attach"] <= 0 || content.Ratios["hash"] <= 0 || content.Times["attach_identity"].N != o.AttachIters ||
		content.Times["python_identity"].N != 1 || content.Times["header_digest"].MedianMS <= 0 || content.IdentityModel.Tensors != 120 ||
		content.Model.Shards != 8 || content.HashModel.Bytes < 2<<20 {
		t.Errorf("content: %+v", content)
	}
	gens := r.Results["generations"].(*GenerationsResult)
	if gens.Times["one"].N != o.AttachIters || gens.Times["four"].N != o.AttachIters || gens.Ratios["four"] <= 0 || len(gens.Others) != 3 ||
		gens.DeviceBytes == 0 || gens.DeviceBytes != gens.ArenaBytes {
		t.Errorf("generations: %+v", gens)
	}
	peer := r.Results["peer"].(*PeerResult)
	if peer.Times["copy"].N != 1 || peer.Rates["copy"] <= 0 || peer.Rates["memcpy"] <= 0 || peer.Ratios["copy"] <= 0 ||
		peer.Ratios["with_verify"] <= 0 || peer.Ratios["with_verify"] > peer.Ratios["copy"] {
		t.Errorf("peer: %+v", peer)
	}
	pf := r.Results["peerfill"].(*PeerFillResult)
	if pf.NotMeasured == "" && (len(pf.Samples["fill"]) != o.Repeats || len(pf.Samples["tcp"]) != o.Repeats || pf.Ratios["fill"] <= 0) {
		t.Errorf("peerfill: %+v", pf)
	}
	// The baseline scenario runs the same binaries as both builds: every
	// figure has a sample of each per timed round (the CLI's, one per
	// timed attach of the round), and a ratio.
	base := r.Results["baseline"].(*BaselineResult)
	if base.NotMeasured != "" || base.Rev != "test" || len(base.Figures) != 8 {
		t.Errorf("baseline: %+v", base)
	}
	for _, f := range base.Figures {
		want := base.Rounds
		if strings.HasPrefix(f.Metric, "wcache attach --json") {
			want *= cliAttachRuns - 1
		}
		if len(f.NewSamples) != want || len(f.BaseSamples) != want || f.New <= 0 || f.Base <= 0 || f.Ratio <= 0 {
			t.Errorf("baseline figure %s: %+v", f.Metric, f)
		}
	}
	if len(r.Targets) < 18 {
		t.Errorf("%d targets: %+v", len(r.Targets), r.Targets)
	}
	for _, tg := range r.Targets {
		if tg.Scenario == "" || tg.Metric == "" || tg.Goal == "" {
			t.Errorf("target without scenario, metric or goal: %+v", tg)
		}
	}

	path := filepath.Join(o.OutDir, "benchmarks.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md, err := benchreport.Render(DocsTemplate, report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| restart | Go read/attach, in-process | ≥ 100 × |", "Flat in bytes", "Daemon total",
		"| takeover | serve --takeover start to ready, median,",
		"| content | attach p50 with the identity check / without, 30 tensors in 8 files |",
		"| generations | attach p50 with 4 generations ÷ with 1 |",
		"| peer | same-node peer fill ÷ memcpy into fresh memory (mock) |",
		"| baseline | new ÷ baseline: wcache attach --json, 120 tensors: attach step (noise band", "Baseline here: `test`"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("rendered docs lack %q", want)
		}
	}
	if strings.Contains(string(md), "<no value>") || strings.Count(string(md), "Not measured in this version") != 4 {
		// engine is not run (its checkpoint has 100,000 tensors), nor peercopy (cgo test builds), nor
		// hostread (Python processes with torch).
		t.Errorf("rendered docs show a missing figure (only micro, engine, peercopy and hostread were not run):\n%s", md)
	}
	after, _ := filepath.Glob(filepath.Join(o.ShmDir, "wcache-bench-*"))
	if len(after) > len(before) {
		t.Errorf("shared-memory folders left behind: %v (before %v)", after, before)
	}
}
