package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/procstat"
)

// TestNegativeDurationsAreUsageErrors: a negative duration exits 2 before
// anything is touched, rather than running with the flag's default.
func TestNegativeDurationsAreUsageErrors(t *testing.T) {
	model := writeTinyModel(t)
	for _, args := range [][]string{
		{"serve", "--backend", "mock", "--gpu-id", "0", "--model", model, "--drain-timeout", "-1s"},
		{"launch", "--backend", "mock", "--model", model, "--drain-timeout", "-1s"},
		{"launch", "--backend", "mock", "--model", model, "--stop-grace", "-5s"},
		{"launch", "--backend", "mock", "--model", model, "--timeout", "-1ms"},
		{"stop", "--device-uuid", "GPU-1", "--timeout", "-1s"},
		{"attach", "--socket", "/x.sock", "--model", model, "--hold", "-1h"},
	} {
		_, stderr, code, run := runInProcess(t, args...)
		if code != ExitUsage || !strings.Contains(stderr, "must not be negative") {
			t.Errorf("wcache %s: exit %d, stderr %q; want exit 2 refusing the negative duration", strings.Join(args, " "), code, stderr)
		}
		if entries, _ := os.ReadDir(run); len(entries) != 0 {
			t.Errorf("wcache %s created %v", strings.Join(args, " "), entries)
		}
	}
}

// TestTemplateMistakeExitsTheSameEverywhere: a device UUID or template that
// cannot name a daemon is one mistake, exit 2, for every command that takes
// it (attach and stop alike).
func TestTemplateMistakeExitsTheSameEverywhere(t *testing.T) {
	model := writeTinyModel(t)
	long := "--socket-template=/tmp/" + strings.Repeat("a", 120) + "/{device_uuid}.sock"
	for _, mistake := range [][]string{{"--device-uuid", "../etc"}, {"--device-uuid", "GPU-1", long}} {
		for _, cmd := range [][]string{
			{"attach", "--model", model, "--device-capability", "x"},
			{"stop"},
			{"cleanup"},
		} {
			args := append(append([]string{}, cmd...), mistake...)
			_, stderr, code, _ := runInProcess(t, args...)
			if code != ExitUsage {
				t.Errorf("wcache %s: exit %d (%s), want 2", strings.Join(args, " "), code, strings.TrimSpace(stderr))
			}
		}
	}
}

// TestLaunchRefusesHugeLayouts: sizes no node can host are usage errors,
// found before anything is allocated by them (1e9 ranks were a 32 GB
// allocation, 4294967295² a makeslice panic whose exit 2 looked like a usage
// error).
func TestLaunchRefusesHugeLayouts(t *testing.T) {
	model := t.TempDir()
	for _, sizes := range [][]string{
		{"--tp-size", "1000000000"},
		{"--tp-size", "4294967295", "--pp-size", "4294967295"},
		{"--tp-size", "2048"},
		{"--base-gpu-id", "9223372036854775807"},
	} {
		stderr, code, run := runLaunchInProcess(t, append([]string{"--backend", "mock", "--model", model}, sizes...)...)
		if code != ExitUsage || !strings.Contains(stderr, "invalid topology") || strings.Contains(stderr, "panic") {
			t.Errorf("launch %v: exit %d, stderr %q; want exit 2, invalid topology", sizes, code, stderr)
		}
		if entries, _ := os.ReadDir(run); len(entries) != 0 {
			t.Errorf("launch %v created %v", sizes, entries)
		}
	}
}

// TestStatusIgnoresAReadyFilePlantedByAnotherUser: a ready file that uid
// 65534 wrote into a shared template directory, naming a live process, is
// not shown as a daemon, and cleanup --force signals nobody.
func TestStatusIgnoresAReadyFilePlantedByAnotherUser(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Skipf("cannot write as another uid: setpriv %v, euid %d (needs root)", err, os.Geteuid())
	}
	dir := pathstest.ShortDir(t)
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	victim := childproc.Sleeper(t)
	start, err := procstat.StartTime(victim)
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "GPU-ffc79498-8ff3-c2dc-3b0d-fafd804516ae"
	ready := filepath.Join(dir, uuid+".ready")
	content := fmt.Sprintf(`{"pid":%d,"start_time":%d,"device_uuid":%q}`, victim, start, uuid)
	for _, f := range []string{ready, ready + ".lock"} {
		out, err := exec.Command(setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
			"sh", "-c", `printf %s "$1" > "$2"`, "plant", content, f).CombinedOutput()
		if err != nil {
			t.Fatalf("plant %s: %v: %s", f, err, out)
		}
	}
	templates := []string{"--ready-template", filepath.Join(dir, "{device_uuid}.ready"),
		"--socket-template", filepath.Join(dir, "{device_uuid}.sock")}

	stdout, stderr, code, _ := runInProcess(t, append([]string{"status", "--json"}, templates...)...)
	if code != 0 || strings.Contains(stdout, `"alive": true`) || !strings.Contains(stdout, "uid 65534") {
		t.Errorf("status: exit %d, stdout %s, stderr %s; want the planted file reported as another user's, no live daemon",
			code, stdout, stderr)
	}
	_, stderr, code, _ = runInProcess(t, append([]string{"cleanup", "--force", "--device-uuid", uuid}, templates...)...)
	if code != 0 {
		t.Errorf("cleanup --force: exit %d, %s", code, stderr)
	}
	time.Sleep(50 * time.Millisecond)
	if s := procstat.Inspect(victim, start); s != procstat.Alive {
		t.Fatalf("the process named by the planted file is %s: cleanup --force signalled it", s)
	}
}

// TestServeRefusesWhatLaunchRefuses: serve's sizes have launch's bound
// (exit 2 naming the topology), and a misspelt --dtype is refused with the
// vocabulary by serve, launch and attach alike, before any backend starts.
func TestServeRefusesWhatLaunchRefuses(t *testing.T) {
	model := writeTinyModel(t)
	for _, args := range [][]string{
		{"serve", "--backend", "mock", "--model", model, "--tp-size", "1000000000"},
		{"serve", "--backend", "mock", "--model", model, "--dtype", "bflaot16"},
		{"attach", "--backend", "mock", "--model", model, "--dtype", "bflaot16"},
		{"launch", "--backend", "mock", "--model", model, "--dtype", "bflaot16"},
	} {
		_, stderr, code, _ := runInProcess(t, args...)
		want := "invalid topology: tp-size"
		if slices.Contains(args, "--dtype") {
			want = "use one of auto, bf16, fp16"
		}
		if code != ExitUsage || !strings.Contains(stderr, want) {
			t.Errorf("wcache %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, strings.TrimSpace(stderr), want)
		}
	}
}
