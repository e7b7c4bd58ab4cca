package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Addresses of the pair's ends and the prefix length of their subnet.
var (
	AddrA = netip.MustParseAddr("10.231.0.1")
	AddrB = netip.MustParseAddr("10.231.0.2")
)

const prefixLen = 30

// namePrefix starts the name of every namespace this package makes.
const namePrefix = "wcache-test-"

// netnsDir is where `ip netns` keeps the named namespaces.
const netnsDir = "/run/netns"

// Pair is two hosts joined by a veth pair.
type Pair struct {
	A, B *Host
}

// Host is one network namespace of a Pair.
type Host struct {
	// Name is the namespace's name (`ip netns exec Name …`).
	Name string
	// Addr is its end's address.
	Addr netip.Addr
	// Link is its end's interface name (inside the namespace).
	Link string

	ip string // path of the ip command
}

// Path is the namespace's file, /run/netns/<Name>.
func (h *Host) Path() string { return filepath.Join(netnsDir, h.Name) }

// New makes a Pair for t and deletes it when t ends. It skips t when the
// machine or the caller's privileges cannot make namespaces (Available
// says why) and fails it when making the pair fails anyway. The loopback
// interface is up in both namespaces.
func New(t testing.TB) *Pair {
	t.Helper()
	if _, err := Available(); err != nil {
		t.Skipf("network namespace tests skipped: %v", err)
	}
	p, del, err := Make(func(format string, args ...any) { t.Logf(format, args...) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := del(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// Make is New for a caller without a testing.TB (the benchmark runner): it
// makes a Pair and returns the function that deletes it. Without the
// capabilities it is Available's error. logf receives what is worth
// knowing but not an error (leftovers of killed runs it could not delete).
func Make(logf func(format string, args ...any)) (_ *Pair, del func() error, err error) {
	ip, err := Available()
	if err != nil {
		return nil, nil, err
	}
	if err := SweepLeftovers(ip); err != nil {
		logf("netns: %v", err)
	}
	owner, err := ownerTag(os.Getpid())
	if err != nil {
		return nil, nil, fmt.Errorf("netns: %w", err)
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, nil, err
	}
	base := namePrefix + owner + "-" + hex.EncodeToString(rnd[:])
	p := &Pair{
		A: &Host{Name: base + "-a", Addr: AddrA, Link: "veth-a", ip: ip},
		B: &Host{Name: base + "-b", Addr: AddrB, Link: "veth-b", ip: ip},
	}
	del = func() error {
		var errs []error
		for _, h := range []*Host{p.A, p.B} {
			if _, err := os.Lstat(h.Path()); err != nil {
				continue // never made
			}
			if out, err := exec.Command(ip, "netns", "delete", h.Name).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("netns: delete %s: %v: %s", h.Name, err, strings.TrimSpace(string(out))))
			}
		}
		return errors.Join(errs...)
	}
	steps := [][]string{
		{"netns", "add", p.A.Name},
		{"netns", "add", p.B.Name},
		{"link", "add", p.A.Link, "netns", p.A.Name, "type", "veth", "peer", "name", p.B.Link, "netns", p.B.Name},
	}
	for _, h := range []*Host{p.A, p.B} {
		steps = append(steps,
			[]string{"-n", h.Name, "addr", "add", fmt.Sprintf("%s/%d", h.Addr, prefixLen), "dev", h.Link},
			[]string{"-n", h.Name, "link", "set", h.Link, "up"},
			[]string{"-n", h.Name, "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if out, err := exec.Command(ip, s...).CombinedOutput(); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("netns: ip %s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out))), del())
		}
	}
	return p, del, nil
}
