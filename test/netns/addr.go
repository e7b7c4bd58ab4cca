package netns

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// AddAddr gives h a second address, a (a /32 on its end of the pair),
// and the other host a route to it over the pair, so that a connection
// opened from h with DialFrom(a, …) reaches the other host from another
// source address than h.Addr: "another machine" to a server that counts
// connections by source (the peer endpoint's per-source limits). It is
// gone with the pair.
func (p *Pair) AddAddr(h *Host, a netip.Addr) error {
	other := p.A
	if h == p.A {
		other = p.B
	}
	for _, s := range [][]string{
		{"-n", h.Name, "addr", "add", a.String() + "/32", "dev", h.Link},
		{"-n", other.Name, "route", "add", a.String() + "/32", "dev", other.Link},
	} {
		if out, err := exec.Command(h.ip, s...).CombinedOutput(); err != nil {
			return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// Run runs fn on an OS thread inside h's network namespace, as DialContext
// does one dial: every socket fn creates belongs to h (and stays usable
// from any goroutine after), so a loop that opens many connections runs on
// one thread. Goroutines fn starts do not run inside h.
func (h *Host) Run(fn func() error) error { return h.inside(fn) }
