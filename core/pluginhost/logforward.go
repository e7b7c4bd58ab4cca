package pluginhost

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	hclog "github.com/hashicorp/go-hclog"
)

// logForwarder re-emits the plugin's stderr lines through the host logger.
// go-plugin would do it too, but it decodes the JSON lines of hclog into
// float64s, so a uint64 field of 4294967296 reached the host as
// 4.294967296e+09 (and one above 2^53 lost digits). Here numbers are
// decoded as json.Number and re-emitted as int64, uint64 or float64, as
// the text says; the other fields keep their JSON types and come sorted by
// key. Lines that are not hclog JSON are logged as go-plugin logs them: by
// their "[LEVEL]" prefix, at error from a "panic: " or "fatal error: " line
// on, else at debug.
//
// forward is called from one goroutine (go-plugin's stderr reader, through
// the log ring), in the order the plugin wrote the lines.
type logForwarder struct {
	l       hclog.Logger
	inPanic bool
}

func newLogForwarder(l hclog.Logger) *logForwarder { return &logForwarder{l: l} }

// forward logs one line; cut is true for a line longer than the ring keeps
// (it is logged at debug as it is, like go-plugin does).
func (f *logForwarder) forward(line string, cut bool) {
	if strings.TrimSpace(line) == "" {
		return
	}
	if !cut && strings.HasPrefix(line, "{") {
		if level, msg, args, ok := decodeHclogLine(line); ok {
			if level == hclog.NoLevel {
				level = hclog.Info
			}
			f.l.Log(level, msg, args...)
			return
		}
	}
	switch {
	case cut:
		f.l.Debug(line)
	case strings.HasPrefix(line, "[TRACE]"):
		f.l.Trace(line)
	case strings.HasPrefix(line, "[DEBUG]"):
		f.l.Debug(line)
	case strings.HasPrefix(line, "[INFO]"):
		f.l.Info(line)
	case strings.HasPrefix(line, "[WARN]"):
		f.l.Warn(line)
	case strings.HasPrefix(line, "[ERROR]"):
		f.l.Error(line)
	case strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: "):
		f.inPanic = true
		f.l.Error(line)
	case f.inPanic:
		f.l.Error(line)
	default:
		f.l.Debug(line)
	}
}

// decodeHclogLine decodes an hclog JSON line into its level, message and
// key/value arguments (sorted by key; @level, @message, @module and
// @timestamp dropped: the host logger adds its own name and time).
func decodeHclogLine(line string) (hclog.Level, string, []any, bool) {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return hclog.NoLevel, "", nil, false
	}
	msg, ok := m["@message"].(string)
	if !ok {
		return hclog.NoLevel, "", nil, false
	}
	levelText, _ := m["@level"].(string)
	keys := make([]string, 0, len(m))
	for k := range m {
		switch k {
		case "@message", "@level", "@module", "@timestamp":
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k, typedValue(m[k]))
	}
	return hclog.LevelFromString(levelText), msg, args, true
}

// typedValue turns a json.Number into int64, uint64 or float64, whichever
// holds the text exactly; other values are returned unchanged.
func typedValue(v any) any {
	n, ok := v.(json.Number)
	if !ok {
		return v
	}
	s := n.String()
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u
	}
	if f, err := n.Float64(); err == nil && !math.IsInf(f, 0) {
		return f
	}
	return s
}
