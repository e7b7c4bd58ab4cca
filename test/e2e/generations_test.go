package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// plannedBytes is what a daemon will allocate for the checkpoint in dir
// (the default plan).
func plannedBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	_, pl := testworld.Plan(t, dir)
	return pl.AllocatedBytes()
}

// TestTargetAndDraftInOneDaemon is issue 25's Done-when, through the real
// binaries on the mock backend: one daemon serves a target and a draft
// model (serve --model T --draft-model D) to two clients at once, each
// getting exactly its own bytes (attach --verify too); a third model that
// would pass --max-bytes is refused before anything is allocated and the
// first two keep serving; a takeover keeps both generations and both
// leases; evicting one leaves the other's lease intact. Status totals are
// the sum of the generations' device bytes.
func TestTargetAndDraftInOneDaemon(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	target := genModel(t, filepath.Join(h.Root, "target"), safetensorstest.GenOptions{Layers: 2})
	draft := genModel(t, filepath.Join(h.Root, "draft"), safetensorstest.GenOptions{Layers: 1, Seed: 7})
	third := genModel(t, filepath.Join(h.Root, "third"), safetensorstest.GenOptions{Layers: 3, Seed: 9})
	budget := plannedBytes(t, target.Dir) + plannedBytes(t, draft.Dir) + 4096
	old := h.start("serve", "--backend", "mock", "--gpu-id", "0", "--model", target.Dir, "--draft-model", draft.Dir,
		"--max-bytes", fmt.Sprint(budget))
	h.waitReady(old, h.Paths(h.UUIDs[0]).Ready)

	st := h.statusOf(0)
	if len(st.Generations) != 2 {
		t.Fatalf("status: %d generations, want the target and the draft", len(st.Generations))
	}
	var sum uint64
	for _, g := range st.Generations {
		sum += g.DeviceBytes
	}
	if total, byGen := st.ResidentBytes(); total != sum || len(byGen) != 2 || sum == 0 || sum > budget {
		t.Fatalf("resident bytes: total %d, per generation %v; the generations sum to %d (budget %d)", total, byGen, sum, budget)
	}

	// Two clients at once, each its own model's bytes.
	tl := h.mustAttachGo(h.UUIDs[0], clientConfig(t, target.Dir))
	dl := h.mustAttachGo(h.UUIDs[0], clientConfig(t, draft.Dir))
	if tl.Manifest.Generation == dl.Manifest.Generation {
		t.Fatalf("target and draft got the same generation %d", tl.Manifest.Generation)
	}
	checkBytes(t, tl.Manifest, target, 0)
	checkBytes(t, dl.Manifest, draft, 0)
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", target.Dir, "--verify")
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", draft.Dir, "--verify")

	// A third model past --max-bytes: refused with the numbers, nothing
	// allocated, the first two untouched.
	res := h.run("publish", "--backend", "mock", "--gpu-id", "0", "--model", third.Dir)
	if res.Code == 0 || !strings.Contains(res.Stderr, "--max-bytes") || !strings.Contains(res.Stderr, fmt.Sprint(budget)) {
		t.Fatalf("a third model past --max-bytes: want a refusal naming the cap %d\n%s", budget, res)
	}
	if after := h.statusOf(0); len(after.Generations) != 2 || after.DeviceBytesTotal != sum {
		t.Fatalf("after the refusal: %d generations, %d bytes held (was %d)", len(after.Generations), after.DeviceBytesTotal, sum)
	}
	for _, l := range []*client.Attachment{tl, dl} {
		checkLeaseLives(t, l.Lease, "the refusal")
	}

	// A takeover keeps both generations, and both leases resume on it.
	ids := []uint64{st.Generations[0].Generation, st.Generations[1].Generation}
	next := h.start("serve", "--backend", "mock", "--gpu-id", "0", "--takeover", "--max-bytes", fmt.Sprint(budget))
	h.waitReady(next, h.Paths(h.UUIDs[0]).Ready)
	if code := h.waitExit(old, 10*time.Second); code != 0 {
		t.Errorf("the daemon taken over exited %d:\n%s", code, old)
	}
	h.waitLeases(h.UUIDs[0], 2)
	st = h.statusOf(0)
	var got []uint64
	for _, g := range st.Generations {
		got = append(got, g.Generation)
		if g.Source != "takeover" || len(g.Leases) != 1 {
			t.Errorf("generation %d after the takeover: source %q, %d leases", g.Generation, g.Source, len(g.Leases))
		}
	}
	if !slices.Equal(got, ids) || st.DeviceBytesTotal != sum {
		t.Fatalf("after the takeover: generations %v (want %v), %d bytes (want %d)", got, ids, st.DeviceBytesTotal, sum)
	}
	checkBytes(t, tl.Manifest, target, 0)
	checkBytes(t, dl.Manifest, draft, 0)
	// wcache status lists both generations with their leases.
	if out := h.mustRun("status"); !strings.Contains(out.Stdout, "2 generations") || !strings.Contains(out.Stdout, draft.Dir) ||
		strings.Count(out.Stdout, "1 (pid ") < 2 {
		t.Errorf("wcache status does not list both generations with a lease each:\n%s", out.Stdout)
	}

	// Evict the draft: its lease is drained (this client lets go), the
	// target's stays.
	go func() {
		<-dl.Lease.Notices()
		dl.Lease.Close()
	}()
	h.mustRun("evict", "--backend", "mock", "--gpu-id", "0", "--model", draft.Dir, "--timeout", "5s")
	st = h.statusOf(0)
	if len(st.Generations) != 1 || st.Generations[0].Generation != tl.Manifest.Generation || len(st.Generations[0].Leases) != 1 {
		t.Fatalf("after evicting the draft: %+v", st.Generations)
	}
	checkLeaseLives(t, tl.Lease, "the draft's evict")
	checkBytes(t, tl.Manifest, target, 0)
	if _, err := h.attachGo(h.UUIDs[0], clientConfig(t, draft.Dir)); err == nil {
		t.Fatal("the evicted draft is still served")
	}
	// Status lists the generation with its state, bytes and leases.
	out := h.mustRun("status")
	if !strings.Contains(out.Stdout, target.Dir) {
		t.Errorf("wcache status does not name the target:\n%s", out.Stdout)
	}
}

// TestLoadOrPublishBesideAFileLoad: client.LoadOrPublish against a daemon
// serving another model (loaded from files) loads and publishes its own
// generation beside it (issue 25 item 4); with --max-bytes leaving no
// room, the publish is refused before allocation and the engine keeps its
// own tensors (SourceLoaded, RESOURCE_EXHAUSTED in the reason).
func TestLoadOrPublishBesideAFileLoad(t *testing.T) {
	for _, tc := range []struct {
		name, source, reason string
		room                 uint64
	}{
		{"room", "source=published", "reason=\n", 1 << 20},
		{"no room", "source=loaded", "(--max-bytes)", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{Devices: 1})
			model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
			// headers: the helper's publication (helper/model) names no files.
			h.startServe(0, model.Dir, "--max-bytes", fmt.Sprint(plannedBytes(t, model.Dir)+tc.room),
				"--content-policies", "identity,hash,headers")
			p, in := h.startLoadOrPublish(0)
			h.waitOutput(p, "loading")
			if _, err := in.Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
			if code := h.waitExit(p, 30*time.Second); code != 0 || !strings.Contains(p.Stdout(), tc.source) || !strings.Contains(p.Stdout(), tc.reason) {
				t.Fatalf("load-or-publish beside a file load: exit %d, want %q with %q\n%s", code, tc.source, tc.reason, p)
			}
			want := 2
			if tc.room == 0 {
				want = 1
			}
			if st := h.statusOf(0); len(st.Generations) != want {
				t.Fatalf("%d generations, want %d", len(st.Generations), want)
			}
			h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")
		})
	}
}

// TestLaunchPlacesTheDraftBesideTheTarget: wcache launch with vLLM's
// --speculative-model loads the draft whole beside each rank's target
// slice: on every GPU of the layout both attach with their own bytes
// (--verify), each by its own config.
func TestLaunchPlacesTheDraftBesideTheTarget(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := shardedModel(t, h, 2)
	draft := genModel(t, filepath.Join(h.Root, "draft"), safetensorstest.GenOptions{Layers: 1, Seed: 7})
	p := h.start(append(launchArgs(model, 2), "--speculative-model", draft.Dir)...)
	h.waitLaunchReady(p, h.UUIDs[:2])
	h.waitOutput(p, "2 daemons ready")
	for rank := 0; rank < 2; rank++ {
		gpu, tp := fmt.Sprint(rank), []string{"--tp-size", "2", "--tp-rank", fmt.Sprint(rank)}
		h.mustRun(append([]string{"attach", "--backend", "mock", "--gpu-id", gpu, "--model", model,
			"--shard-pattern", shardPattern, "--verify"}, tp...)...)
		h.mustRun(append([]string{"attach", "--backend", "mock", "--gpu-id", gpu, "--model", draft.Dir, "--verify"}, tp...)...)
		if st := h.statusOf(rank); len(st.Generations) != 2 {
			t.Errorf("GPU %d holds %d generations, want the target's slice and the draft", rank, len(st.Generations))
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(p, launchStopTimeout); code != 0 {
		t.Fatalf("launcher exit %d after SIGTERM:\n%s", code, p)
	}
}
