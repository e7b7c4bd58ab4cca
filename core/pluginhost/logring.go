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
//
// A Go crash dump ("panic: …" or "fatal error: …" and the goroutine
// stacks after it) is kept short: its first line, the first stack's
// header and top frame, then one line counting the rest. The forwarder
// has logged the whole dump already, so an *ExitError that prints the
// kept lines does not print it a second time.
type logRing struct {
	*linewriter.Writer // splits the stream (Write) and calls push

	mu      sync.Mutex
	max     int
	lines   []string
	forward func(line string, cut bool) // nil: none

	dump       int // lines of the crash dump seen so far; 0: not in one
	dumpHidden int // of those, not kept
}

// dumpKept is how many lines of a crash dump the ring keeps.
const dumpKept = 4

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
	if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
		r.dump, r.dumpHidden = 1, 0
	} else if r.dump > 0 && !strings.HasPrefix(line, "{") {
		r.dump++
		if r.dump > dumpKept {
			r.dumpHidden++
			summary := fmt.Sprintf("… %d more lines of the stack trace (logged in full as the plugin wrote them)", r.dumpHidden)
			if r.dumpHidden == 1 {
				r.lines = append(r.lines, summary)
			} else {
				r.lines[len(r.lines)-1] = summary
			}
			return
		}
	} else {
		r.dump = 0
	}
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
		if args[i] == "stack" {
			// A recovered panic's stack: logged in full once, not kept.
			b.WriteString(" stack=(in the log)")
			continue
		}
		fmt.Fprintf(&b, " %s=%v", args[i], args[i+1])
	}
	return b.String()
}
