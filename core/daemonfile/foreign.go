package daemonfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// ForeignDaemon is a `wcache serve` process of another user, found in
// /proc: it serves a GPU this user's discovery does not look at (its
// socket is under its owner's runtime directory, mode 0600, unless it was
// started with --socket-group).
type ForeignDaemon struct {
	PID int
	UID uint32
	// Args are its command line after the program name.
	Args []string
}

// Command is the daemon's command line for a message.
func (f ForeignDaemon) Command() string { return "wcache " + strings.Join(f.Args, " ") }

// ForeignDaemons lists the `wcache serve` processes (and `wcache launch`
// daemons, which run `wcache serve`) whose effective uid is not uid, by
// pid. It reads /proc only (no signal, no socket); processes whose command
// line cannot be read are skipped. Nothing found (or no /proc): nil.
func ForeignDaemons(uid uint32) []ForeignDaemon {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []ForeignDaemon
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fi, err := os.Stat(filepath.Join("/proc", e.Name()))
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid == uid {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
		if filepath.Base(argv[0]) != "wcache" || !servesGPU(argv[1:]) {
			continue
		}
		out = append(out, ForeignDaemon{PID: pid, UID: st.Uid, Args: argv[1:]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// servesGPU reports whether args run the serve command (its first word
// that is not a flag).
func servesGPU(args []string) bool {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a == "serve"
		}
	}
	return false
}

// ShareHint says how a daemon of another user is shared with uid: the
// words of the no-daemon error and of `wcache status`.
func ShareHint(uid uint32) string {
	return fmt.Sprintf("a daemon of another user serves uid %d only if its owner starts it with "+
		"`wcache serve --socket-group GROUP --allow-uid %d` (or --allow-gid) and a socket template in a "+
		"directory uid %d can reach, and this side sets WCACHE_SOCKET_TEMPLATE (or --socket-template) to the same template", uid, uid, uid)
}
