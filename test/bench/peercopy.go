package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"strconv"

	"github.com/wcache/wcache/test/benchreport"
)

// PeerCopyResult is issue 26's fake-driver figure: the CUDA and ROCm
// plugins' own BenchmarkPeerCopyPaced (plugins/internal/testkit/gputest
// BenchPeerCopy), a device-to-device copy between two plugin processes
// on the fake driver, whose copy engine is paced at a set rate; each
// benchmark's paced_fraction metric is the copy's rate over the engine's
// (1: the copy streams keep the engine busy). NotMeasured says why nothing
// was.
type PeerCopyResult struct {
	NotMeasured string `json:"not_measured,omitempty"`
	*MicroResult
}

// peerCopyGoal bounds the peer copy's rate over the paced engine's.
const peerCopyGoal = 0.9

// peerCopyPackages hold BenchmarkPeerCopyPaced; their tests build the
// plugins and the fake drivers with gcc.
func peerCopyPackages() []string { return []string{"./plugins/cuda", "./plugins/rocm"} }

// runPeerCopy runs BenchmarkPeerCopyPaced of every package for Repeats
// copies (goBench) and checks each one's paced_fraction.
func runPeerCopy(ctx context.Context, e *Env) (any, []Target, error) {
	if _, err := exec.LookPath("gcc"); err != nil {
		e.logf("peercopy: not measured: gcc not found")
		return &PeerCopyResult{NotMeasured: "gcc not found: the plugins' tests build the fake drivers with it"}, nil, nil
	}
	res, err := goBench(ctx, e.RepoDir, "^BenchmarkPeerCopyPaced$", strconv.Itoa(e.Repeats)+"x", peerCopyPackages()...)
	if err != nil {
		return nil, nil, err
	}
	var targets []Target
	for _, b := range res.Benchmarks {
		f, ok := b.Metrics["paced_fraction"]
		if !ok {
			return nil, nil, fmt.Errorf("%s %s reports no paced_fraction", b.Package, b.Name)
		}
		e.logf("peercopy: %s: %.3f of the paced engine's rate", b.Package, f)
		targets = append(targets, benchreport.AtLeast("fake-driver peer copy / paced copy engine, "+path.Base(b.Package), f, peerCopyGoal, "×"))
	}
	if len(targets) != len(peerCopyPackages()) {
		return nil, nil, fmt.Errorf("%d peer-copy benchmarks ran, want one in each of %v", len(targets), peerCopyPackages())
	}
	return &PeerCopyResult{MicroResult: res}, targets, nil
}
