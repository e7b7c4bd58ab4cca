package pluginhost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// maxLogLine bounds one kept line; longer lines are cut.
const maxLogLine = 2048

// logRing keeps the last lines a plugin wrote to stderr, to explain a
// plugin that died. go-plugin hands it every raw stderr line (it is
// ClientConfig.Stderr); hclog JSON lines are shortened to
// "[LEVEL] message key=value". It is safe for concurrent use.
type logRing struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func newLogRing(max int) *logRing { return &logRing{max: max} }

// Write accepts any split of the byte stream into calls.
func (r *logRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if room := maxLogLine - len(r.partial); room > 0 {
				r.partial = append(r.partial, p[:min(len(p), room)]...)
			}
			break
		}
		if room := maxLogLine - len(r.partial); room > 0 {
			r.partial = append(r.partial, p[:min(i, room)]...)
		}
		r.push(string(r.partial))
		r.partial = r.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (r *logRing) push(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	r.lines = append(r.lines, formatLogLine(line))
	if len(r.lines) > r.max {
		r.lines = slices.Delete(r.lines, 0, len(r.lines)-r.max)
	}
}

// Lines returns the kept lines, oldest first, including an unterminated
// last line.
func (r *logRing) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.lines)
	if len(r.partial) > 0 {
		out = append(out, formatLogLine(string(r.partial)))
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
