package nvmlinfo

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/gpuid"
	"github.com/wcache/wcache/plugins/cuda/internal/testkit/fakelib"
)

const (
	gpuUUID = "GPU-11111111-2222-3333-4444-555555555555"
	migUUID = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
)

// libEnv names the fake NVML TestMain builds (an environment variable
// keeps the package free of mutable globals).
const libEnv = "WCACHE_NVMLINFO_TEST_LIB"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakenvml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The fake reads its device table once, at the first nvmlInit of the
	// process, like real NVML: set it before any test runs.
	os.Setenv("FAKECUDA_DEVICES", gpuUUID+","+migUUID)
	os.Setenv("FAKECUDA_MEMORY", "2147483648")
	lib, err := fakelib.NVML("..", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmlinfo tests:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	os.Setenv(libEnv, lib)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func parse(t *testing.T, s string) gpuid.UUID {
	t.Helper()
	u, _, err := gpuid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// openFake opens the fake NVML TestMain built, closed at the test's end.
func openFake(t *testing.T) *Library {
	t.Helper()
	l, err := Open(os.Getenv(libEnv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("/nonexistent/libnvidia-ml.so.1")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libnvidia-ml.so.1") {
		t.Fatalf("Open(missing) = %v, want an error naming the library", err)
	}
}

func TestLookupGPU(t *testing.T) {
	l := openFake(t)
	d, ok := l.Lookup(parse(t, gpuUUID))
	if !ok {
		t.Fatal("Lookup of a known GPU reported not found")
	}
	want := Device{Name: "Fake NVML GPU 0", TotalMemory: 2 << 30, FreeMemory: 2<<30 - 3<<20, HaveMemory: true, PCIBusID: "0000:10:00.0", Capability: "9.0"}
	if d != want {
		t.Fatalf("Lookup = %+v, want %+v", d, want)
	}
}

func TestLookupMIGUsesParentForPCI(t *testing.T) {
	l := openFake(t)
	d, ok := l.Lookup(parse(t, migUUID))
	if !ok {
		t.Fatal("Lookup of a MIG instance reported not found")
	}
	if !d.MIG || d.Name != "Fake NVML MIG 1" || d.PCIBusID != "0000:20:00.0" || d.Capability != "9.0" {
		t.Fatalf("Lookup = %+v, want MIG instance 1 with its parent's PCI id and capability", d)
	}
}

func TestLookupUnknown(t *testing.T) {
	l := openFake(t)
	if d, ok := l.Lookup(parse(t, "GPU-00000000-0000-0000-0000-000000000001")); ok {
		t.Fatalf("Lookup of an unknown UUID = %+v, true", d)
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"0000:3b:00.0":     "0000:3b:00.0",
		"0001:C1:1f.7":     "0001:c1:1f.7",
	} {
		if got, ok := NormalizeBusID(in); !ok || got != want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "3b:00.0", "0000:3b:00", "0000:3g:00.0", "0000:100:00.0", "0000:3b:20.0", "0000:3b:00.8", "0000::00.0"} {
		if got, ok := NormalizeBusID(in); ok {
			t.Errorf("NormalizeBusID(%q) = %q, true; want false", in, got)
		}
	}
}
