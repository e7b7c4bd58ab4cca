package netns

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Capability bits (linux/capability.h).
const (
	capNetAdmin = 12
	capSysAdmin = 21
)

// Available returns the path of the ip command when this process can make
// network namespaces and veth links, and otherwise an error that says what
// is missing: not Linux, no `ip` (iproute2) in PATH, or an effective
// capability set without CAP_NET_ADMIN or CAP_SYS_ADMIN (`ip netns add`
// mounts the namespace's file).
func Available() (string, error) {
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("network namespaces are Linux only (GOOS %s)", runtime.GOOS)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return "", fmt.Errorf("the ip command (iproute2) is not in PATH: %w", err)
	}
	eff, err := effectiveCaps()
	if err != nil {
		return "", err
	}
	var missing []string
	if eff&(1<<capNetAdmin) == 0 {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if eff&(1<<capSysAdmin) == 0 {
		missing = append(missing, "CAP_SYS_ADMIN")
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("they need CAP_NET_ADMIN and CAP_SYS_ADMIN (root); this process (uid %d, effective capabilities %#x) lacks %s",
			os.Geteuid(), eff, strings.Join(missing, " and "))
	}
	return ip, nil
}

// effectiveCaps reads CapEff from /proc/self/status.
func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("read capabilities: CapEff %q: %w", v, err)
			}
			return caps, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return 0, errors.New("read capabilities: no CapEff in /proc/self/status")
}
