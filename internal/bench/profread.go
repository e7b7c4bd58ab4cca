package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Section titles of pprofTop's summary.
const (
	pprofFlatTitle = "# by own time (flat)"
	pprofCumTitle  = "# by cumulative time (cum)"
)

// pprofRow is one function line of `go tool pprof -top`: its own and
// cumulative shares of all samples, in percent.
type pprofRow struct {
	Name         string
	FlatPct, Cum float64
}

// parsePprofTop reads the rows of each section of a pprofTop summary,
// keyed by section title. Lines that are not function rows are skipped.
func parsePprofTop(top string) map[string][]pprofRow {
	out := map[string][]pprofRow{}
	section := ""
	for line := range strings.SplitSeq(top, "\n") {
		if strings.HasPrefix(line, "# ") {
			section = strings.TrimSpace(line)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		name := strings.TrimSuffix(strings.Join(f[5:], " "), " (inline)")
		out[section] = append(out[section], pprofRow{Name: name, FlatPct: flat, Cum: cum})
	}
	return out
}

// cumOf is the cumulative share of the function whose name ends with
// suffix (after a path separator or at the start), or 0 when absent.
func cumOf(rows []pprofRow, suffix string) float64 {
	for _, r := range rows {
		if r.Name == suffix || strings.HasSuffix(r.Name, "/"+suffix) {
			return r.Cum
		}
	}
	return 0
}

// profileReading is what the profile of group says, read from its
// summary; "" when the summary does not show what the reading needs.
func profileReading(group, top string) string {
	rows := parsePprofTop(top)
	switch group {
	case "fill":
		return fillProfileReading(rows[pprofCumTitle])
	case keyStartup:
		return startupProfileReading(rows[pprofFlatTitle])
	}
	return ""
}

// fillProfileReading splits the mock's load workers' samples between the
// read (readChunk: pread from the checkpoint) and the write (writeChunk:
// pwrite into the allocation file) of each piece.
func fillProfileReading(cum []pprofRow) string {
	total := cumOf(cum, "mockbackend.copyChunk")
	read, write := cumOf(cum, "mockbackend.readChunk"), cumOf(cum, "mockbackend.writeChunk")
	if total <= 0 || read+write <= 0 {
		return ""
	}
	r, w := read/total, write/total
	s := fmt.Sprintf(" The CPU profile of the mock's Load into fresh allocations (below): of the load workers' samples, "+
		"%s%% are in writeChunk (pwrite into the allocation file) and %s%% in readChunk (pread from the checkpoint)",
		num(100*w), num(100*r))
	switch {
	case w > 1.5*r:
		s += ": the write into fresh shared memory takes most of the CPU time"
	case r > 1.5*w:
		s += ": the read takes most of the CPU time"
	default:
		s += ": the two take comparable CPU time"
	}
	// The rest in percent, to 0.01 (the shares are of 10 ms samples).
	switch rest := max(math.Round(10000*(1-r-w))/10000, 0); {
	case rest == 0:
		s += ", and nothing measurable is left for the rest of the load loop."
	case rest < 0.1:
		s += fmt.Sprintf(", and %s%% is left for the rest of the load loop.", num(100*rest))
	default:
		s += fmt.Sprintf("; %s%% is elsewhere in the load loop, outside the two system calls.", num(100*rest))
	}
	return s + " A CPU profile counts time on a CPU only: time a worker waits (for the disk, or for another writer of " +
		"the same file) does not show in it."
}

// startupProfileReading names the largest own-time entry of the profile
// beside the load.
func startupProfileReading(flat []pprofRow) string {
	if len(flat) == 0 {
		return ""
	}
	top := flat[0]
	return fmt.Sprintf(" In the CPU profile of the start-up beside the load (below), the largest own-time entry is %s "+
		"with %s%% of all samples.", top.Name, num(top.FlatPct))
}
