package pluginhost

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/linewriter"
)

// maxLogLine bounds one kept line; longer lines are cut.
const maxLogLine = 2048

// maxForwardLine bounds one forwarded line (go-plugin's own limit): a
// recovered panic's stack rides in one JSON line and must reach the host
// logger whole.
const maxForwardLine = 64 << 10

// logRing keeps the last lines a plugin wrote to stderr, to explain a
// plugin that died. go-plugin hands it every raw stderr line (it is
// ClientConfig.Stderr); hclog JSON lines are shortened to
// "[LEVEL] message key=value". It is safe for concurrent use.
type logRing struct {
	*linewriter.Writer // splits the stream (Write) and calls push

	mu      sync.Mutex
	max     int
	lines   []string
	forward func(line string, cut bool) // nil: none
}

// newLogRing keeps the last max lines and hands every line to forward
// (nil: none) first.
func newLogRing(max int, forward func(line string, cut bool)) *logRing {
	r := &logRing{max: max, forward: forward}
	r.Writer = linewriter.New(maxForwardLine, r.push)
	return r
}

// push keeps one line (a cut one as far as it goes); blank lines are
// dropped.
func (r *logRing) push(line string, cut bool) {
	if strings.TrimSpace(line) == "" {
		return
	}
	if r.forward != nil {
		r.forward(line, cut)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, cutLine(formatLogLine(line)))
	if len(r.lines) > r.max {
		r.lines = slices.Delete(r.lines, 0, len(r.lines)-r.max)
	}
}

// Lines returns the kept lines, oldest first, including an unterminated
// last line.
func (r *logRing) Lines() []string {
	// The partial line first: the Writer's lock is taken before r.mu when
	// a line completes, never after.
	partial, _ := r.Partial()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.lines)
	if partial != "" {
		out = append(out, cutLine(formatLogLine(partial)))
	}
	if len(out) > r.max {
		out = out[len(out)-r.max:]
	}
	return out
}

// cutLine shortens a kept line to maxLogLine bytes.
func cutLine(s string) string {
	if len(s) <= maxLogLine {
		return s
	}
	return s[:maxLogLine]
}

// formatLogLine renders an hclog JSON line as "[LEVEL] message k=v ..."
// (keys sorted, timestamp and module dropped, numbers as written); any
// other line is returned as is.
func formatLogLine(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	level, msg, args, ok := decodeHclogLine(line)
	if !ok {
		return line
	}
	levelText := ""
	if level != hclog.NoLevel {
		levelText = level.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s", strings.ToUpper(levelText), msg)
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %s=%v", args[i], args[i+1])
	}
	return b.String()
}
