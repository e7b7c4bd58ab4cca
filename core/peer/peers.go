package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// Resolver looks a name up (net.DefaultResolver in production, a table in
// tests).
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// ResolvePeers turns the configured peers into addresses: each entry is
// host:port; an IP stays as it is, a name is looked up and every address
// it resolves to is a peer (one DNS name for many, as a Kubernetes
// headless Service gives). Addresses in self (this daemon's own, so it
// never asks itself) are left out, duplicates too; the order is the
// configured one, a name's addresses in the resolver's order. A name that
// does not resolve is skipped and reported in the error only when no peer
// is left.
func ResolvePeers(ctx context.Context, r Resolver, peers, self []string) ([]string, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	var out []string
	var errs []error
	add := func(addr string) {
		if !slices.Contains(self, addr) && !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	for _, p := range peers {
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %q: %w", p, err))
			continue
		}
		if _, err := netip.ParseAddr(host); err == nil {
			add(p)
			continue
		}
		addrs, err := r.LookupHost(ctx, host)
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %q: %w", p, err))
			continue
		}
		for _, a := range addrs {
			add(net.JoinHostPort(a, port))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no peer address (%w)", ErrNoPeer, errors.Join(errs...))
	}
	return out, nil
}
