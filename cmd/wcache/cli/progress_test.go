package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestProgressBar: on a terminal the bar (progressbar) shows the operation,
// the bytes, the rate and the elapsed:ETA pair, and ends its line at 100%.
func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	p := newProgress("loading", &out, hclog.NewNullLogger(), true)
	p.update(0, 64<<20)
	time.Sleep(150 * time.Millisecond) // the bar redraws at most every 100 ms
	p.update(16<<20, 64<<20)
	mid := out.String()
	p.update(64<<20, 64<<20)
	p.finish()
	all := out.String()
	for _, want := range []string{"loading", "25%", "/64 MiB", "/s", "s:"} {
		if !strings.Contains(mid, want) {
			t.Errorf("bar at 25%% lacks %q: %q", want, mid)
		}
	}
	if !strings.Contains(all, "100%") || !strings.Contains(all, "64/64 MiB") || !strings.HasSuffix(all, "\n") {
		t.Errorf("finished bar: %q, want 100%%, 64/64 MiB and a line end", all)
	}
	// An operation that fails half-way leaves the bar where it was, on a
	// line of its own.
	out.Reset()
	p = newProgress("verifying", &out, hclog.NewNullLogger(), true)
	p.update(1<<20, 4<<20)
	p.finish()
	if s := out.String(); strings.Contains(s, "100%") || !strings.HasSuffix(s, "\n") {
		t.Errorf("bar of a failed run: %q, want no 100%% and a line end", s)
	}
}

// TestProgressLogLines: without a terminal (or with --log-format json) the
// progress is a structured log line every 10%, with an ETA until the last,
// which has the elapsed time instead; nothing is drawn.
func TestProgressLogLines(t *testing.T) {
	var out bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &out, JSONFormat: true, Level: hclog.Info})
	p := newProgress("loading", &out, log, false)
	for done := uint64(0); done <= 100; done++ {
		p.update(done, 100)
		p.update(done, 100) // a repeated value adds nothing
	}
	p.finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d lines, want 10 (10%% … 90%%, then 100%%):\n%s", len(lines), out.String())
	}
	for i, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i, err, l)
		}
		pct := rec["percent"].(float64)
		if rec["@message"] != "loading" || pct != float64((i+1)*10) || rec["total"].(float64) != 100 || rec["rate"] == nil {
			t.Errorf("line %d: %s", i, l)
		}
		if _, eta := rec["eta"]; eta != (pct < 100) {
			t.Errorf("line %d: eta present %v at %v%%: %s", i, eta, pct, l)
		}
	}
	if !strings.Contains(lines[9], `"elapsed"`) {
		t.Errorf("last line has no elapsed time: %s", lines[9])
	}
}
