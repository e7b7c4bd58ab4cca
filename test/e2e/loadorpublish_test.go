package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
)

// helperEngineVersionEnv sets the engine_version of the load-or-publish
// helper's config (default helperPublication's).
const helperEngineVersionEnv = "WCACHE_E2E_HELPER_ENGINE_VERSION"

// helperDPRankEnv makes the load-or-publish helper's config data-parallel
// rank N of 2 (default: no data parallelism).
const helperDPRankEnv = "WCACHE_E2E_HELPER_DP_RANK"

// runLoadOrPublishHelper is the test binary acting as an engine that calls
// client.LoadOrPublish with helperPublication: its loader prints "loading"
// and waits for a line "go" on stdin; it prints "source=S" and
// "reason=R" and exits 0, or prints the error and exits 1.
func runLoadOrPublishHelper() int {
	ctx := context.Background()
	c, ok := dialHelperDaemon(ctx, client.Options{ClientName: "load-or-publish"})
	if !ok {
		return 1
	}
	defer c.Close()
	pub := helperPublication()
	pub.Config.DeviceCapability = "mock" // as the daemon fills it in, so that the attach compares equal
	if v := os.Getenv(helperEngineVersionEnv); v != "" {
		pub.Config.EngineVersion = v
	}
	if v := os.Getenv(helperDPRankEnv); v != "" {
		rank, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		pub.Config.DPSize, pub.Config.DPRank = 2, uint32(rank)
	}
	in := bufio.NewScanner(os.Stdin)
	load := func(ctx context.Context) (client.Publication, client.FillFunc, error) {
		fmt.Println("loading")
		if !in.Scan() || in.Text() != "go" {
			return client.Publication{}, nil, fmt.Errorf("told not to finish loading")
		}
		return pub, client.ShmFill(func(i int, dst []byte) error {
			for j := range dst {
				dst[j] = byte(i + j)
			}
			return nil
		}, false), nil
	}
	res, err := c.LoadOrPublish(ctx, pub.Config, load, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if res.Attachment != nil {
		defer res.Attachment.Lease.Close()
	}
	fmt.Printf("source=%s\nreason=%s\n", res.Source, res.Reason)
	return 0
}

// startLoadOrPublish starts the load-or-publish helper against gpu's
// daemon, with extra environment; the writer is its stdin.
func (h *harness) startLoadOrPublish(gpu int, env ...string) (*process, io.WriteCloser) {
	h.t.Helper()
	return h.startSelf("load-or-publish", gpu, env...)
}

// TestLoadOrPublishLostRace: two engines find the daemon empty; the one
// whose loader finishes second gets ErrHoldsWeights from its publish and,
// through client.LoadOrPublish, attaches to the winner's weights when they
// are its config's (issue 27, item 1); with another config it publishes
// its own generation beside the winner's (issue 25).
func TestLoadOrPublishLostRace(t *testing.T) {
	for _, tc := range []struct {
		name, engineVersion, source, reason string
	}{
		{"same config attaches", "", "source=attached", "reason=daemon at"},
		{"other config publishes beside", "2", "source=published", "reason="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{Devices: 1})
			h.startEmpty(0)
			var env []string
			if tc.engineVersion != "" {
				env = append(env, helperEngineVersionEnv+"="+tc.engineVersion)
			}
			loser, loserIn := h.startLoadOrPublish(0, env...)
			h.waitOutput(loser, "loading") // found the daemon empty, is loading
			winner, winnerIn := h.startHelper(0)
			h.waitOutput(winner, "filled")
			if _, err := io.WriteString(winnerIn, "commit\n"); err != nil {
				t.Fatal(err)
			}
			if code := h.waitExit(winner, 10*time.Second); code != 0 {
				t.Fatalf("winner exit %d:\n%s", code, winner)
			}
			if _, err := io.WriteString(loserIn, "go\n"); err != nil {
				t.Fatal(err)
			}
			if code := h.waitExit(loser, 30*time.Second); code != 0 {
				t.Fatalf("loser exit %d (today: ErrHoldsWeights):\n%s", code, loser)
			}
			out := loser.Stdout()
			if !strings.Contains(out, tc.source) || !strings.Contains(out, tc.reason) {
				t.Fatalf("loser: want %q with %q\n%s", tc.source, tc.reason, loser)
			}
		})
	}
}

// TestLoadOrPublishDPReplicaFilledFromSibling: two empty daemons on the
// node; an engine of data-parallel rank 0 loads and publishes into the
// first. The engine of rank 1, through client.LoadOrPublish against the
// second, attaches: that daemon filled its weights from the first's
// publication (issue 26), and the engine's loader never runs (its stdin is
// closed: a load would fail). With --peer-fill=off it loads as before.
func TestLoadOrPublishDPReplicaFilledFromSibling(t *testing.T) {
	for _, peerFill := range []string{"auto", "off"} {
		t.Run(peerFill, func(t *testing.T) {
			h := newHarness(t, harnessOptions{Devices: 2})
			h.startEmpty(0)
			h.startEmpty(1, "--peer-fill", peerFill)
			first, firstIn := h.startLoadOrPublish(0, helperDPRankEnv+"=0")
			h.waitOutput(first, "loading")
			if _, err := io.WriteString(firstIn, "go\n"); err != nil {
				t.Fatal(err)
			}
			if code := h.waitExit(first, 30*time.Second); code != 0 || !strings.Contains(first.Stdout(), "source=published") {
				t.Fatalf("rank 0: exit %d, want published:\n%s", code, first)
			}
			second, secondIn := h.startLoadOrPublish(1, helperDPRankEnv+"=1")
			_ = secondIn.Close()
			code := h.waitExit(second, 30*time.Second)
			st := h.statusOf(1)
			if peerFill == "off" {
				if code == 0 || !strings.Contains(second.String(), "told not to finish loading") || len(st.Generations) != 0 {
					t.Fatalf("rank 1 without peer fill: exit %d, want its loader called:\n%s", code, second)
				}
				return
			}
			if code != 0 || !strings.Contains(second.Stdout(), "source=attached") || strings.Contains(second.Stdout(), "loading") {
				t.Fatalf("rank 1: exit %d, want attached without loading:\n%s", code, second)
			}
			if want := "peer " + h.UUIDs[0]; st.FilledFrom != want || st.FillFallback != "" || len(st.Generations) != 1 ||
				st.Generations[0].Config.DPRank != 1 {
				t.Fatalf("second daemon: filled from %q (fallback %q), generations %+v; want %q", st.FilledFrom, st.FillFallback,
					st.Generations, want)
			}
		})
	}
}

// layoutRow is the layout part of `wcache status --json`.
type layoutRow struct {
	DeviceUUID string `json:"device_uuid"`
	State      string `json:"state"`
	TPSize     uint32 `json:"tp_size"`
	TPRank     uint32 `json:"tp_rank"`
}

// TestEmptyLaunchKeepsLayout: `wcache launch --tp-size 2` without a model
// starts empty daemons that show their rank's layout and refuse a publish
// of another rank, naming the field (issue 27, item 4).
func TestEmptyLaunchKeepsLayout(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 2})
	p := h.start("launch", "--backend", "mock", "--tp-size", "2", "--timeout", "30s", "--drain-timeout", "2s", "--stop-grace", "10s")
	h.waitLaunchReady(p, h.UUIDs)
	var rows []layoutRow
	if err := json.Unmarshal([]byte(h.mustRun("status", "--json").Stdout), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		gpu := slices.Index(h.UUIDs, r.DeviceUUID)
		if r.State != "empty" || r.TPSize != 2 || int(r.TPRank) != gpu {
			t.Errorf("status of GPU %d: %+v, want empty with tp_size 2, tp_rank %d", gpu, r, gpu)
		}
	}
	res := h.run("publish", "--backend", "mock", "--gpu-id", "1", "--model", model.Dir, "--tp-size", "2", "--tp-rank", "0")
	if res.Code == 0 || !strings.Contains(res.Stderr, "tp_rank") {
		t.Fatalf("rank 0 publishing into GPU 1's daemon: want a refusal naming tp_rank\n%s", res)
	}
	h.mustRun("publish", "--backend", "mock", "--gpu-id", "1", "--model", model.Dir, "--tp-size", "2", "--tp-rank", "1")
	h.stopLauncher(p, "launcher")
}
