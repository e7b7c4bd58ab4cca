package cli

import (
	"os"
	"strings"
	"testing"
)

// TestNegativeDurationsAreUsageErrors: a negative duration exits 2 before
// anything is touched; --drain-timeout -1s used to become 30s silently.
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
// it (attach used to exit 1 where stop exited 2).
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
