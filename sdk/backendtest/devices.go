package backendtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// checkUUID applies the core's rule, then the prefix and the patterns the
// backend pinned.
func (s *suite) checkUUID(t *testing.T, uuid string) {
	t.Helper()
	if err := names.ValidateDeviceUUID(uuid); err != nil {
		t.Errorf("the core would refuse this UUID: %v", err)
		return
	}
	if p := s.opts.UUIDPrefix; p != "" && !strings.HasPrefix(uuid, p) {
		t.Errorf("UUID %q does not start with the pinned vendor prefix %q (Options.UUIDPrefix)", uuid, p)
	}
	if len(s.opts.UUIDPatterns) == 0 {
		return
	}
	for _, p := range s.opts.UUIDPatterns {
		if p.MatchString(uuid) {
			return
		}
	}
	t.Errorf("UUID %q matches none of Options.UUIDPatterns %v", uuid, s.opts.UUIDPatterns)
}

func (s *suite) testInfo(t *testing.T) {
	b := s.newBackend(t)
	info, err := b.Info(s.ctx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name == "" || info.Version == "" || info.Platform == "" {
		t.Errorf("Info = %+v: Name, Version and Platform must be set", info)
	}
	if len(info.HandleKinds) == 0 {
		t.Errorf("Info = %+v: HandleKinds must name the kinds Export produces", info)
	}
	for _, k := range info.HandleKinds {
		if err := names.ValidateHandleKind(k); err != nil {
			t.Errorf("Info.HandleKinds: %v", err)
		}
	}
}

// uuids lists the devices and checks the list's shape.
func (s *suite) uuids(t *testing.T, b sdk.Backend) []string {
	t.Helper()
	devs, err := b.Devices(s.ctx(t))
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	if len(devs) <= s.opts.Ordinal {
		t.Fatalf("Devices lists %d devices; the suite needs ordinal %d", len(devs), s.opts.Ordinal)
	}
	out := make([]string, len(devs))
	for i, d := range devs {
		if d.Ordinal != i {
			t.Errorf("device %d has Ordinal %d; Devices must list ordinals 0..n-1 in order", i, d.Ordinal)
		}
		if d.TotalMemory == 0 {
			t.Errorf("device %d reports TotalMemory 0", i)
		}
		if d.FreeMemory > d.TotalMemory {
			t.Errorf("device %d reports FreeMemory %d > TotalMemory %d", i, d.FreeMemory, d.TotalMemory)
		}
		s.checkUUID(t, d.UUID)
		out[i] = d.UUID
	}
	seen := map[string]bool{}
	for _, u := range out {
		if seen[u] {
			t.Errorf("UUID %q listed twice", u)
		}
		seen[u] = true
	}
	return out
}

func (s *suite) testDevicesList(t *testing.T) {
	b := s.newBackend(t)
	listed := s.uuids(t, b)
	for i, want := range listed {
		got, err := b.DeviceUUID(s.ctx(t), i)
		if err != nil {
			t.Fatalf("DeviceUUID(%d): %v", i, err)
		}
		if got != want {
			t.Errorf("DeviceUUID(%d) = %q, Devices lists %q", i, got, want)
		}
	}
}

func (s *suite) testUUIDsStableAcrossCalls(t *testing.T) {
	b := s.newBackend(t)
	first := s.uuids(t, b)
	for range 3 {
		if again := s.uuids(t, b); !slices.Equal(first, again) {
			t.Fatalf("UUIDs changed between calls: %v then %v", first, again)
		}
	}
}

func (s *suite) testUUIDsStableAcrossRestart(t *testing.T) {
	first := s.uuids(t, s.newBackend(t))
	second := s.uuids(t, s.newBackend(t))
	if !slices.Equal(first, second) {
		t.Fatalf("UUIDs differ between two instances (a restarted daemon would not find its own socket): %v then %v", first, second)
	}
}

func (s *suite) testUnknownOrdinal(t *testing.T) {
	b := s.newBackend(t)
	n := len(s.uuids(t, b))
	_, err := b.DeviceUUID(s.ctx(t), n)
	wantKind(t, "DeviceUUID(number of devices)", err, sdk.ErrNoSuchDevice)
	_, err = b.DeviceUUID(s.ctx(t), -1)
	wantKind(t, "DeviceUUID(-1)", err, sdk.ErrNoSuchDevice)
	s.assertUsable(t, b)
}
