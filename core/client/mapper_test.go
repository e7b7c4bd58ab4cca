package client

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk/names"
)

// acmeKind is a vendor kind whose Data is "acme:" + a file path and whose
// mapper reads the file into a private buffer (a stand-in for a vendor
// library's own mapping call).
const acmeKind = "x-acme-buf"

type countingMapper struct {
	mapped, released int
	fail             bool
}

func (c *countingMapper) Map(h Handle) (Mapping, error) {
	if c.fail {
		return Mapping{}, errors.New("acme driver says no")
	}
	path, ok := strings.CutPrefix(string(h.Data), "acme:")
	if !ok {
		return Mapping{}, errors.New("not an acme handle")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Mapping{}, err
	}
	c.mapped++
	return Mapping{Data: data, Release: func() error { c.released++; return nil }}, nil
}

func TestRegisteredVendorMapperMapsItsKind(t *testing.T) {
	h := holdCheckpoint(t)
	m := *h.m
	m.Handles = []Handle{{Kind: acmeKind, Data: []byte("acme:" + h.shm), Size: h.m.Handles[0].Size}}

	_, err := Map(&m)
	var nm *NotMappableError
	if !errors.As(err, &nm) || nm.Kind != acmeKind {
		t.Fatalf("Map with the default mappers: %v, want *NotMappableError for %s", err, acmeKind)
	}
	for _, want := range []string{`"x-acme-buf"`, "Register", "posix-shm"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}

	reg := DefaultMappers()
	acme := &countingMapper{}
	if err := reg.Register(acmeKind, acme); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Kinds(), ","); got != "memfd,posix-shm,x-acme-buf" {
		t.Errorf("Kinds = %s", got)
	}
	ts, err := reg.Map(&m)
	if err != nil {
		t.Fatalf("Map with the acme mapper: %v", err)
	}
	for _, tn := range m.Tensors {
		got, ok := ts.Get(tn.Name)
		if !ok || !bytes.Equal(got.Data, h.device[tn.Offset:tn.Offset+tn.Length]) {
			t.Fatalf("tensor %s: bytes differ from the device's", tn.Name)
		}
	}
	if err := ts.Close(); err != nil || acme.released != 1 {
		t.Fatalf("Close = %v, released %d times, want once", err, acme.released)
	}
	// A registry is a value: the default one is unchanged.
	if _, ok := DefaultMappers().Lookup(acmeKind); ok {
		t.Fatal("registering in one registry changed DefaultMappers")
	}
}

func TestFailedMapReleasesWhatWasMapped(t *testing.T) {
	h := holdCheckpoint(t)
	m := *h.m
	size := h.m.Handles[0].Size
	m.Handles = []Handle{{Kind: acmeKind, Data: []byte("acme:" + h.shm), Size: size}, {Kind: "x-acme-other", Size: size}}
	reg := NewMappers()
	ok, bad := &countingMapper{}, &countingMapper{fail: true}
	if err := reg.Register(acmeKind, ok); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("x-acme-other", bad); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Map(&m); err == nil || !strings.Contains(err.Error(), "acme driver says no") {
		t.Fatalf("Map = %v, want the mapper's error", err)
	}
	if ok.mapped != 1 || ok.released != 1 {
		t.Fatalf("first handle mapped %d, released %d times; want 1 and 1", ok.mapped, ok.released)
	}
	// A mapper that returns too few bytes is refused as well.
	m.Handles = m.Handles[:1]
	m.Handles[0].Size = size + 1
	if _, err := reg.Map(&m); err == nil || !strings.Contains(err.Error(), "returned") {
		t.Fatalf("Map of a short mapping = %v", err)
	}
}

func TestRegisterRefusesBadKindsAndTwice(t *testing.T) {
	reg := DefaultMappers()
	for _, bad := range []string{"acme-buf", "x-acme", "x-Acme-buf", ""} {
		if err := reg.Register(bad, &countingMapper{}); !errors.Is(err, names.ErrInvalidHandleKind) {
			t.Errorf("Register(%q) = %v, want ErrInvalidHandleKind", bad, err)
		}
	}
	if err := reg.Register(names.KindPosixShm, &countingMapper{}); !errors.Is(err, ErrMapperRegistered) {
		t.Errorf("Register(posix-shm) on the defaults = %v, want ErrMapperRegistered", err)
	}
	if err := reg.Register(acmeKind, nil); err == nil {
		t.Error("Register of a nil mapper succeeded")
	}
}
