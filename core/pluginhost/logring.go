package pluginhost

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/wcache/wcache/core/linewriter"
)

// maxLogLine bounds one kept line; longer lines are cut.
const maxLogLine = 2048

// logRing keeps the last lines a plugin wrote to stderr, to explain a
// plugin that died. go-plugin hands it every raw stderr line (it is
// ClientConfig.Stderr); hclog JSON lines are shortened to
// "[LEVEL] message key=value". It is safe for concurrent use.
type logRing struct {
	*linewriter.Writer // splits the stream (Write) and calls push

	mu    sync.Mutex
	max   int
	lines []string
}

func newLogRing(max int) *logRing {
	r := &logRing{max: max}
	r.Writer = linewriter.New(maxLogLine, r.push)
	return r
}

// push keeps one line (a cut one as far as it goes); blank lines are
// dropped.
func (r *logRing) push(line string, _ bool) {
	if strings.TrimSpace(line) == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, formatLogLine(line))
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
		out = append(out, formatLogLine(partial))
	}
	if len(out) > r.max {
		out = out[len(out)-r.max:]
	}
	return out
}

// formatLogLine renders an hclog JSON line as "[LEVEL] message k=v ..."
// (keys sorted, timestamp dropped); any other line is returned as is.
func formatLogLine(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return line
	}
	msg, ok := m["@message"].(string)
	if !ok {
		return line
	}
	level, _ := m["@level"].(string)
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s", strings.ToUpper(level), msg)
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, m[k])
	}
	return b.String()
}
