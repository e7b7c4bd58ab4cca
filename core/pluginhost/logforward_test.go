package pluginhost

import (
	"strings"
	"testing"

	hclog "github.com/hashicorp/go-hclog"
)

func TestDecodeHclogLineKeepsNumbersExact(t *testing.T) {
	line := `{"@level":"info","@message":"ready","@module":"acme","@timestamp":"2026-12-01T00:00:00.000000Z",` +
		`"big":18446744073709551615,"n":4294967296,"neg":-3,"ratio":0.25,"name":"x","on":true}`
	level, msg, args, ok := decodeHclogLine(line)
	if !ok || level != hclog.Info || msg != "ready" {
		t.Fatalf("decode = %v %q %v %v", level, msg, args, ok)
	}
	want := []any{"big", uint64(18446744073709551615), "n", int64(4294967296), "name", "x", "neg", int64(-3),
		"on", true, "ratio", 0.25}
	if len(args) != len(want) {
		t.Fatalf("args = %#v", args)
	}
	for i := range want {
		if args[i] != want[i] {
			t.Errorf("arg %d = %#v (%T), want %#v (%T)", i, args[i], args[i], want[i], want[i])
		}
	}
	if got := formatLogLine(line); got != "[INFO] ready big=18446744073709551615 n=4294967296 name=x neg=-3 on=true ratio=0.25" {
		t.Errorf("formatLogLine = %q", got)
	}
}

func TestForwarderLevels(t *testing.T) {
	var out strings.Builder
	f := newLogForwarder(hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &out}))
	f.forward(`{"@level":"warn","@message":"careful","k":1}`, false)
	f.forward("[ERROR] plain", false)
	f.forward("something", false)
	f.forward("panic: boom", false)
	f.forward("goroutine 1 [running]:", false)
	f.forward(`{"@message":"no level"}`, false)
	got := out.String()
	for _, want := range []string{"[WARN]  careful: k=1", "[ERROR] [ERROR] plain", "[DEBUG] something",
		"[ERROR] panic: boom", "[ERROR] goroutine 1 [running]:", "[INFO]  no level"} {
		if !strings.Contains(got, want) {
			t.Errorf("forwarded log lacks %q:\n%s", want, got)
		}
	}
}
