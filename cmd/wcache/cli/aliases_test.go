package cli

import (
	"strings"
	"testing"
)

// TestEngineFlagNamesAreAliases: the names vLLM and SGLang users type
// (--model-path, --tensor-parallel-size, --tp_rank…) are read as wcache's
// flags. attach gets as far as looking for the daemon (exit 3), so every
// flag parsed; a rank at or above the aliased size is refused, so the size
// reached the config.
func TestEngineFlagNamesAreAliases(t *testing.T) {
	model := writeTinyModel(t)
	sock := t.TempDir() + "/none.sock"
	for _, args := range [][]string{
		{"--model-path", model, "--tensor-parallel-size", "2", "--tp-rank", "1"},
		{"--model", model, "--tp", "2", "--tp_rank", "1", "--pipeline-parallel-size", "2", "--pp-rank", "1"},
		{"--model_path", model, "--data-parallel-size", "2", "--dp-rank", "1", "--expert-parallel-size", "4", "--ep-rank", "3"},
	} {
		full := append([]string{"attach", "--socket", sock, "--device-capability", "x"}, args...)
		_, stderr, code, _ := runInProcess(t, full...)
		if code != ExitNoDaemon {
			t.Errorf("wcache %s: exit %d (%s), want 3 (no daemon: every flag parsed)", strings.Join(full, " "), code, strings.TrimSpace(stderr))
		}
	}
	_, stderr, code, _ := runInProcess(t, "attach", "--socket", sock, "--model-path", model, "--tensor-parallel-size", "2", "--tp-rank", "2")
	if code != ExitUsage || !strings.Contains(stderr, "tp_rank") {
		t.Errorf("--tensor-parallel-size 2 --tp-rank 2: exit %d (%s), want 2 refusing the rank", code, stderr)
	}
	stdout, _, code, _ := runInProcess(t, "serve", "--help")
	if code != 0 || !strings.Contains(stdout, "(also --tensor-parallel-size, --tp)") || !strings.Contains(stdout, "(also --model-path)") {
		t.Errorf("serve --help does not name the aliases:\n%s", stdout)
	}
}

// TestUnknownFlagSuggestsTheClosest: cobra suggests commands, not flags;
// wcache names the nearest flag of the command (aliases lead to the flag
// they mean), and nothing when nothing is near.
func TestUnknownFlagSuggestsTheClosest(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--jsn"}, "did you mean --json?"},
		{[]string{"attach", "--verif"}, "did you mean --verify?"},
		{[]string{"serve", "--gpu_idd", "0"}, "did you mean --gpu-id?"},
		{[]string{"launch", "--tensor-paralel-size", "2"}, "did you mean --tp-size?"},
		{[]string{"serve", "--metrics", "x"}, "did you mean --metrics-listen?"},
		{[]string{"stop", "--frobnicate"}, "unknown flag: --frobnicate (see wcache stop --help)"},
		{[]string{"--frobnicate"}, "unknown flag: --frobnicate (see wcache --help)"},
	} {
		_, stderr, code, _ := runInProcess(t, c.args...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("wcache %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

func TestClosestFlag(t *testing.T) {
	cands := map[string]string{"json": "json", "model": "model", "model-path": "model", "tp-size": "tp-size"}
	for typed, want := range map[string]string{"jsno": "json", "modle": "model", "model-pat": "model", "TP_SIZE": "tp-size", "x": "", "zzzzzzzz": ""} {
		if got := closestFlag(typed, cands); got != want {
			t.Errorf("closestFlag(%q) = %q, want %q", typed, got, want)
		}
	}
	if levenshtein("kitten", "sitting") != 3 || levenshtein("", "abc") != 3 || levenshtein("abc", "abc") != 0 {
		t.Error("levenshtein is wrong on the textbook cases")
	}
}
