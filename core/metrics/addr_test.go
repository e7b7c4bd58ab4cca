package metrics

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/paths/pathstest"
)

func TestMetricsParseAddr(t *testing.T) {
	long := "/" + strings.Repeat("x", 110)
	for _, c := range []struct {
		in          string
		allowRemote bool
		network     string
		address     string
		err         error
	}{
		{in: "unix:/run/wcache/metrics.sock", network: "unix", address: "/run/wcache/metrics.sock"},
		{in: "unix:/run//wcache/./m.sock", network: "unix", address: "/run/wcache/m.sock"},
		{in: "unix:relative.sock", err: ErrBadAddr},
		{in: "unix:", err: ErrBadAddr},
		{in: "unix:" + long, err: ErrBadAddr},
		{in: "127.0.0.1:9100", network: "tcp", address: "127.0.0.1:9100"},
		{in: "127.3.2.1:0", network: "tcp", address: "127.3.2.1:0"},
		{in: "[::1]:9100", network: "tcp", address: "[::1]:9100"},
		{in: "localhost:9100", network: "tcp", address: "localhost:9100"},
		{in: "LOCALHOST:9100", network: "tcp", address: "LOCALHOST:9100"},
		{in: "0.0.0.0:9100", err: ErrNotLoopback},
		{in: ":9100", err: ErrNotLoopback},
		{in: "[::]:9100", err: ErrNotLoopback},
		{in: "10.1.2.3:9100", err: ErrNotLoopback},
		{in: "metrics.example.com:9100", err: ErrNotLoopback},
		{in: "0.0.0.0:9100", allowRemote: true, network: "tcp", address: "0.0.0.0:9100"},
		{in: ":9100", allowRemote: true, network: "tcp", address: ":9100"},
		{in: "127.0.0.1", err: ErrBadAddr},
		{in: "127.0.0.1:http", err: ErrBadAddr},
		{in: "127.0.0.1:65536", err: ErrBadAddr},
		{in: "127.0.0.1:+80", err: ErrBadAddr},
		{in: "", err: ErrBadAddr},
	} {
		a, err := ParseAddr(c.in, c.allowRemote)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("ParseAddr(%q, %t) = %+v, %v; want %v", c.in, c.allowRemote, a, err, c.err)
			} else if !strings.Contains(err.Error(), c.in) {
				t.Errorf("ParseAddr(%q): error %q does not name the address", c.in, err)
			}
			continue
		}
		if err != nil || a.Network != c.network || a.Address != c.address {
			t.Errorf("ParseAddr(%q, %t) = %+v, %v; want %s %s", c.in, c.allowRemote, a, err, c.network, c.address)
		}
	}
}

func TestMetricsAddrString(t *testing.T) {
	for _, in := range []string{"unix:/run/m.sock", "127.0.0.1:9100"} {
		a, err := ParseAddr(in, false)
		if err != nil {
			t.Fatal(err)
		}
		if a.String() != in {
			t.Errorf("String() = %q, want %q", a.String(), in)
		}
	}
}

func TestMetricsAddrCheck(t *testing.T) {
	dir := pathstest.ShortDir(t)
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"unix:" + filepath.Join(dir, "m.sock"), true},
		{"unix:" + filepath.Join(dir, "missing", "m.sock"), false},
		{"unix:" + filepath.Join(regular, "m.sock"), false},
		{"unix:" + regular, false},
		{"127.0.0.1:1", true},
	} {
		a, err := ParseAddr(c.addr, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Check(); (err == nil) != c.ok {
			t.Errorf("Check(%s) = %v, want ok %t", c.addr, err, c.ok)
		} else if err != nil && !strings.Contains(err.Error(), a.Address) {
			t.Errorf("Check(%s): error %q does not name the path", c.addr, err)
		}
	}
}
