package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// ownerTag names the run of process pid: "<pid>.<start time in clock
// ticks since boot>", so that a reused pid does not pass for the run.
func ownerTag(pid int) (string, error) {
	start, err := startTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d.%d", pid, start), nil
}

// startTime is field 22 of /proc/<pid>/stat.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count the fields after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	const startField = 22 - 3 // fields after ")" start at field 3
	if len(f) <= startField {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[startField], 10, 64)
}

// SweepLeftovers deletes the namespaces this package named for a run that
// no longer exists: its pid is gone, or now belongs to a process started
// at another time. Names of live runs (parallel test processes) and names
// this package did not make are left alone. ip is the ip command's path.
func SweepLeftovers(ip string) error {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep leftovers: %w", err)
	}
	var errs []error
	for _, e := range entries {
		owner, ok := leftoverOwner(e.Name())
		if !ok {
			continue
		}
		pid, _ := strconv.Atoi(owner[:strings.IndexByte(owner, '.')])
		if live, err := ownerTag(pid); err == nil && live == owner {
			continue // that run is still going
		}
		if out, err := exec.Command(ip, "netns", "delete", e.Name()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete leftover %s: %w: %s", e.Name(), err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// leftoverOwner parses "wcache-test-<pid>.<start>-<hex>-a|b" and returns
// "<pid>.<start>".
func leftoverOwner(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 || (parts[2] != "a" && parts[2] != "b") {
		return "", false
	}
	pid, start, ok := strings.Cut(parts[0], ".")
	if !ok {
		return "", false
	}
	if _, err := strconv.ParseUint(pid, 10, 31); err != nil {
		return "", false
	}
	if _, err := strconv.ParseUint(start, 10, 64); err != nil {
		return "", false
	}
	return parts[0], true
}
