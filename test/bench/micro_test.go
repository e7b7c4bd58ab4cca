package bench

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseBenchOutput(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/wcache/wcache/core/plan
cpu: AMD EPYC
BenchmarkBuild3000Tensors-2   	    2043	    581234 ns/op	  401234 B/op	    3017 allocs/op
PASS
pkg: github.com/wcache/wcache/core/safetensors
BenchmarkParseHeader/tensors=300-2         	    1000	   1021453 ns/op	  42.10 MB/s	  123456 B/op	    2711 allocs/op
pkg: github.com/wcache/wcache/plugins/cuda
BenchmarkPeerCopyPaced-2   	       3	 805123456 ns/op	 249.90 MB/s	         0.9996 paced_fraction	   12345 B/op	     210 allocs/op
ok  	github.com/wcache/wcache/core/safetensors	3.1s
`
	got := parseBenchOutput(out)
	if len(got) != 3 {
		t.Fatalf("parsed %d benchmarks: %+v", len(got), got)
	}
	want0 := MicroBench{Package: "github.com/wcache/wcache/core/plan", Name: "BenchmarkBuild3000Tensors",
		Metrics: map[string]float64{"ns/op": 581234, "B/op": 401234, "allocs/op": 3017}}
	if !reflect.DeepEqual(got[0], want0) {
		t.Errorf("got %+v, want %+v", got[0], want0)
	}
	if got[1].Name != "BenchmarkParseHeader/tensors=300" || got[1].Metrics["MB/s"] != 42.10 || got[1].Metrics["allocs/op"] != 2711 {
		t.Errorf("got %+v", got[1])
	}
	if p := got[2]; p.Name != "BenchmarkPeerCopyPaced" || p.Metrics["paced_fraction"] != 0.9996 || p.Metrics["allocs/op"] != 210 || len(p.Metrics) != 5 {
		t.Errorf("a benchmark's own metric: got %+v", p)
	}
}

func TestRunMicroRunsTheHotPathBenchmarks(t *testing.T) {
	o := tinyOptions(t)
	o.MicroBenchtime = "1x"
	// The limit bounds a hang, not a speed: go test compiles five packages
	// first, which on a busy 2-core machine took more than a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, _, err := runMicro(ctx, &Env{Options: o})
	if err != nil {
		t.Fatal(err)
	}
	r := res.(*MicroResult)
	pkgs := map[string]bool{}
	for _, b := range r.Benchmarks {
		pkgs[b.Package] = true
		if b.Metrics["ns/op"] <= 0 {
			t.Errorf("%s: %v ns/op", b.Name, b.Metrics["ns/op"])
		}
	}
	for _, p := range microPackages() {
		if !pkgs["github.com/wcache/wcache/"+strings.TrimPrefix(p, "./")] {
			t.Errorf("no benchmark of %s in %+v", p, r.Benchmarks)
		}
	}
}

// TestRunPeerCopyReportsBothVendors runs the plugins' peer-copy benchmark
// once per vendor through go test: each must report its paced_fraction,
// which becomes a target of its vendor.
func TestRunPeerCopyReportsBothVendors(t *testing.T) {
	o := tinyOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, targets, err := runPeerCopy(ctx, &Env{Options: o})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.(*PeerCopyResult); r.NotMeasured != "" {
		t.Skipf("not measured: %s", r.NotMeasured)
	}
	var metrics []string
	for _, tg := range targets {
		metrics = append(metrics, tg.Metric)
		if tg.Value <= 0 || tg.Goal != "≥ 0.9" {
			t.Errorf("target %+v", tg)
		}
	}
	if want := []string{"fake-driver peer copy / paced copy engine, cuda", "fake-driver peer copy / paced copy engine, rocm"}; !reflect.DeepEqual(metrics, want) {
		t.Errorf("targets %q, want %q", metrics, want)
	}
}
