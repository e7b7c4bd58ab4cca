package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// runLaunchInProcess runs `wcache launch args...` through Main with a
// private XDG_RUNTIME_DIR and returns stderr, the exit code and the runtime
// dir. Every case here fails before a plugin or daemon would start.
func runLaunchInProcess(t *testing.T, args ...string) (string, int, string) {
	t.Helper()
	_, stderr, code, run := runInProcess(t, append([]string{"launch"}, args...)...)
	return stderr, code, run
}

func TestLaunchRefusesBadInputBeforeTouchingAnything(t *testing.T) {
	model := t.TempDir()
	base := []string{"--backend", "mock", "--model", model}
	tests := []struct {
		name string
		args []string
		want []string // substrings of stderr
	}{
		{"socket template without placeholder", append(base, "--tp-size", "2", "--socket-template", "/tmp/wcache.sock"),
			[]string{"--socket-template", "{device_uuid}"}},
		{"ready template without placeholder", append(base, "--ready-template", "/tmp/ready.json"),
			[]string{"--ready-template", "{device_uuid}"}},
		{"tp rank given", append(base, "--tp-size", "2", "--tp-rank", "1"), []string{"--tp-rank is assigned by the launcher"}},
		{"pp rank given", append(base, "--pp-rank", "0"), []string{"--pp-rank is assigned by the launcher"}},
		{"whole checkpoint on every GPU", append(base, "--tp-size", "2"),
			[]string{"WHOLE checkpoint on every one of the 2 GPUs", "omit --model", "publish", "--shard-pattern", "--replicate"}},
		{"shard pattern without model", []string{"--backend", "mock", "--tp-size", "2", "--shard-pattern", "x-{tp_rank}"},
			[]string{"--shard-pattern and --replicate need --model"}},
		{"model missing", []string{"--backend", "mock", "--model", filepath.Join(model, "nope")}, []string{"not a checkpoint directory"}},
		{"node rank past nnodes", append(base, "--tp-size", "4", "--nnodes", "2", "--node-rank", "2"),
			[]string{"node-rank", "less than nnodes (2)"}},
		{"tp not divisible", append(base, "--tp-size", "3", "--nnodes", "2"), []string{"tp-size 3 is not a multiple"}},
		{"gpu list too short", append(base, "--tp-size", "4", "--gpus", "0,1"), []string{"lists 2 GPUs but this node hosts 4 ranks"}},
		{"gpu list duplicate", append(base, "--tp-size", "2", "--gpus", "1,1"), []string{"GPU 1 would host two ranks"}},
		{"gpu list not integers", append(base, "--tp-size", "2", "--gpus", "0,x"), []string{"--gpus", "not an integer"}},
		{"gpu list with step", append(base, "--tp-size", "2", "--gpus", "0,1", "--gpu-id-step", "2"),
			[]string{"--gpus replaces --base-gpu-id and --gpu-id-step"}},
		{"negative base", append(base, "--base-gpu-id", "-1"), []string{"base-gpu-id", "negative"}},
		{"step collision", append(base, "--tp-size", "2", "--pp-size", "2", "--gpu-id-step", "2"), []string{"GPU 2 would host two ranks"}},
		{"stray argument", append(base, "extra"), []string{`unexpected argument "extra"`}},
		{"bad extra", append(base, "--extra", "novalue"), []string{"--extra", "KEY=VALUE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stderr, code, run := runLaunchInProcess(t, tc.args...)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d (usage); stderr:\n%s", code, ExitUsage, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			// Nothing was created: not even the private directory.
			if entries, err := os.ReadDir(run); err != nil || len(entries) != 0 {
				t.Errorf("runtime dir has %d entries (%v) after a refused launch", len(entries), err)
			}
		})
	}
}

func TestLaunchPassesFlagsThroughToServe(t *testing.T) {
	cmd := newLaunchCommand(&env{})
	err := cmd.ParseFlags([]string{
		"--backend", "mock", "--plugin-dir", "/opt/p", "--model", "/m", "--tp-size", "4", "--pp-size", "2",
		"--dtype", "bf16", "--extra", "a=1", "--extra", "b=2 3", "--socket-template", "/r/{device_uuid}.sock",
		"--shard-pattern", "model-rank-{tp_rank}-part-*.safetensors", "--drain-timeout", "5s",
		"--nnodes", "2", "--node-rank", "1", "--gpu-id-step", "1", "--timeout", "1m", "--stop-grace", "3s", "--force",
		"--backend-opt", "memory=1GiB", "--backend-opt", "devices=a,b",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := serveArgs(cmd.Flags(), []string{"--log-level", "debug"})
	want := []string{
		"--backend=mock", "--backend-opt=memory=1GiB", "--backend-opt=devices=a,b", "--drain-timeout=5s", "--dtype=bf16", "--extra=a=1", "--extra=b=2 3", "--model=/m",
		"--plugin-dir=/opt/p", "--shard-pattern=model-rank-{tp_rank}-part-*.safetensors",
		"--socket-template=/r/{device_uuid}.sock", "--log-level", "debug",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("serveArgs =\n%q\nwant\n%q", got, want)
	}
	// Every flag passed on is one serve understands.
	serve := newServeCommand(&env{})
	for _, a := range got[:len(got)-2] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if serve.Flags().Lookup(name) == nil {
			t.Errorf("launch passes --%s, which serve does not define", name)
		}
	}
}

// Every flag launch shares with serve is passed on, except the ones the
// launcher owns; a flag serve lacks must be launch-only.
func TestLaunchFlagsMatchServe(t *testing.T) {
	launch := newLaunchCommand(&env{}).Flags()
	serve := newServeCommand(&env{}).Flags()
	only := append(launchOnlyFlags(), "tp-rank", "pp-rank")
	launch.VisitAll(func(f *pflag.Flag) {
		inServe := serve.Lookup(f.Name) != nil
		isOnly := false
		for _, o := range only {
			isOnly = isOnly || o == f.Name
		}
		if !inServe && !isOnly {
			t.Errorf("launch flag --%s is neither launch-only nor a serve flag", f.Name)
		}
		// --force and --takeover mean more to the launcher than to one
		// daemon (it cleans or locks differently); it passes --takeover on
		// itself (launcher.Options.Takeover).
		if inServe && f.Name != "force" && f.Name != "takeover" && isOnly && f.Name != "tp-rank" && f.Name != "pp-rank" {
			t.Errorf("launch flag --%s is launch-only but serve defines it too; pass it through?", f.Name)
		}
	})
}

// TestLaunchPassesTheDraftModel: vLLM's and SGLang's spellings of a
// speculative model are --draft-model, which launch passes on to every
// serve (a generation of its own on each GPU), once per draft.
func TestLaunchPassesTheDraftModel(t *testing.T) {
	for _, spelling := range []string{"--draft-model", "--speculative-model", "--speculative-draft-model-path", "--speculative_model"} {
		cmd := newLaunchCommand(&env{})
		cmd.Flags().SetNormalizeFunc(normalizeFlagName)
		if err := cmd.ParseFlags([]string{"--backend", "mock", "--model", "/m", spelling, "/d", "--draft-model", "/e"}); err != nil {
			t.Fatalf("%s: %v", spelling, err)
		}
		got := serveArgs(cmd.Flags(), nil)
		want := []string{"--backend=mock", "--draft-model=/d", "--draft-model=/e", "--model=/m"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: serveArgs = %q, want %q", spelling, got, want)
		}
	}
}
