package driver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/cuda/internal/testkit/fakelib"
	"github.com/wcache/wcache/plugins/internal/testkit/gputest"
	"github.com/wcache/wcache/sdk"
)

// libDirEnv names the folder of the fake driver builds TestMain makes (an
// environment variable keeps the package free of mutable globals):
// libcuda.so.1 and the variants nouuidv2/, nouuid/ and noipcopen/.
const libDirEnv = "WCACHE_DRIVER_TEST_LIBS"

const helperEnv = "WCACHE_DRIVER_TEST_HELPER"

// fakeLib returns the fake driver build for a variant ("" for the full one).
func fakeLib(variant string) string {
	return filepath.Join(os.Getenv(libDirEnv), variant, "libcuda.so.1")
}

func TestMain(m *testing.M) {
	os.Exit(gputest.Main(m, gputest.MainOptions{
		Name: "driver", HelperEnv: helperEnv, Helper: helperMain,
		Build: func(dir string) error {
			for variant, defines := range map[string][]string{
				"":          nil,
				"nouuidv2":  {"FAKECUDA_OMIT_cuDeviceGetUuid_v2"},
				"nouuid":    {"FAKECUDA_OMIT_cuDeviceGetUuid_v2", "FAKECUDA_OMIT_cuDeviceGetUuid"},
				"noipcopen": {"FAKECUDA_OMIT_cuIpcOpenMemHandle_v2"},
				"noproc":    {"FAKECUDA_OMIT_cuGetProcAddress"},
			} {
				if _, err := fakelib.CUDA("..", dir, variant, defines...); err != nil {
					return err
				}
			}
			return nil
		},
		LibDirEnv: libDirEnv,
	}))
}

// openFake opens a private copy of lib (fresh driver state) with env set.
func openFake(t *testing.T, lib string, env map[string]string) *Driver {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	p, err := fakelib.Copy(lib, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(p)
	if err != nil {
		t.Fatalf("Open(%s): %v", p, err)
	}
	if err := d.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return d
}

// onDevice locks the test goroutine to its thread with dev's primary
// context current, undone at cleanup.
func onDevice(t *testing.T, d *Driver, ordinal int) {
	t.Helper()
	runtime.LockOSThread()
	dev, err := d.DeviceGet(ordinal)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CtxSetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.CtxSetCurrent(Context{})
		d.PrimaryCtxRelease(dev)
		runtime.UnlockOSThread()
	})
}

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("/nonexistent/dir/libcuda.so.1")
	if !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("err = %v, want sdk.ErrUnavailable", err)
	}
	var le *LoadError
	if !errors.As(err, &le) || le.Library != "/nonexistent/dir/libcuda.so.1" {
		t.Fatalf("err = %#v, want *LoadError for the path", err)
	}
	if !strings.HasPrefix(err.Error(), "backend unavailable: cannot load /nonexistent/dir/libcuda.so.1: ") {
		t.Fatalf("message %q does not name the library", err)
	}
}

func TestOpenMissingSymbol(t *testing.T) {
	_, err := Open(fakeLib("noipcopen"))
	if !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("err = %v, want sdk.ErrUnavailable", err)
	}
	want := "backend unavailable: " + fakeLib("noipcopen") + ": missing symbol cuIpcOpenMemHandle_v2"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
}

func TestOpenMissingBothUUIDSymbols(t *testing.T) {
	_, err := Open(fakeLib("nouuid"))
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "missing symbol cuDeviceGetUuid_v2 (or cuDeviceGetUuid)") {
		t.Fatalf("err = %v, want missing cuDeviceGetUuid_v2 (or cuDeviceGetUuid)", err)
	}
}

func TestUUIDV1Fallback(t *testing.T) {
	d := openFake(t, fakeLib("nouuidv2"), map[string]string{"FAKECUDA_DEVICES": "MIG-00112233445566778899aabbccddeeff"})
	if d.HasUUIDV2() || !d.HasUUIDV1() {
		t.Fatalf("HasUUIDV2=%v HasUUIDV1=%v", d.HasUUIDV2(), d.HasUUIDV1())
	}
	u, err := d.DeviceUUID(0)
	if err != nil {
		t.Fatal(err)
	}
	// v1 reports the physical GPU (the fake inverts the MIG bytes).
	if got, want := u.Hex(), "ffeeddcc-bbaa-9988-7766-554433221100"; got != want {
		t.Fatalf("DeviceUUID via v1 = %s, want %s", got, want)
	}
}

func TestUUIDV2PreferredAndV1Physical(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "MIG-00112233445566778899aabbccddeeff"})
	u, err := d.DeviceUUID(0)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Hex(); got != "00112233-4455-6677-8899-aabbccddeeff" {
		t.Fatalf("DeviceUUID = %s, want the MIG bytes from _v2", got)
	}
	p, err := d.DeviceUUIDV1(0)
	if err != nil {
		t.Fatal(err)
	}
	if p == u {
		t.Fatal("v1 UUID equals v2 UUID for a MIG instance in the fake")
	}
}

func TestDeviceQueries(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "3", "FAKECUDA_MEMORY": "1073741824"})
	n, err := d.DeviceCount()
	if err != nil || n != 3 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	dev, err := d.DeviceGet(2)
	if err != nil {
		t.Fatal(err)
	}
	name, err := d.DeviceName(dev)
	if err != nil || name != "Fake CUDA Device 2" {
		t.Fatalf("DeviceName = %q, %v", name, err)
	}
	mem, err := d.DeviceTotalMem(dev)
	if err != nil || mem != 1<<30 {
		t.Fatalf("DeviceTotalMem = %d, %v", mem, err)
	}
	bus, err := d.DeviceAttribute(AttrPCIBusID, dev)
	if err != nil || bus != 0x30 {
		t.Fatalf("PCI bus = %#x, %v", bus, err)
	}
	major, _ := d.DeviceAttribute(AttrComputeCapabilityMajor, dev)
	minor, _ := d.DeviceAttribute(AttrComputeCapabilityMinor, dev)
	if major != 9 || minor != 0 {
		t.Fatalf("capability %d.%d", major, minor)
	}
	if v, err := d.Version(); err != nil || v < 11000 {
		t.Fatalf("Version = %d, %v", v, err)
	}
}

func TestErrorCodesMapToSDK(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "1"})
	_, err := d.DeviceGet(7)
	if !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Fatalf("DeviceGet(7) = %v, want ErrNoSuchDevice", err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != ErrorInvalidDevice || ce.Name != "CUDA_ERROR_INVALID_DEVICE" || ce.Func != "cuDeviceGet" {
		t.Fatalf("err = %#v", err)
	}
	if got, want := err.Error(), "cuDeviceGet: CUDA_ERROR_INVALID_DEVICE (101): invalid device ordinal"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	// A context-dependent call on a thread without a context.
	_, err = d.MemAlloc(1 << 20)
	if !errors.As(err, &ce) || ce.Code != ErrorInvalidContext {
		t.Fatalf("MemAlloc without context = %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
	onDevice(t, d, 0)
	_, err = d.MemAlloc(4 << 30)
	if !errors.Is(err, sdk.ErrOutOfMemory) || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("MemAlloc(4GiB) = %v, want ErrOutOfMemory naming CUDA_ERROR_OUT_OF_MEMORY", err)
	}
}

func TestInitErrorsAreUnavailable(t *testing.T) {
	for name, tc := range map[string]struct {
		key, value string
		code       Result
	}{
		"no visible device":   {"CUDA_VISIBLE_DEVICES", "", ErrorNoDevice},
		"insufficient driver": {"FAKECUDA_INIT_ERROR", "35", ErrorInsufficientDriver},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(tc.key, tc.value)
			p, err := fakelib.Copy(fakeLib(""), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			d, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			err = d.Init()
			var ce *Error
			if !errors.Is(err, sdk.ErrUnavailable) || !errors.As(err, &ce) || ce.Code != tc.code {
				t.Fatalf("Init with %s=%q = %v, want code %d wrapping ErrUnavailable", tc.key, tc.value, err, tc.code)
			}
		})
	}
}

func TestAsyncCopyAndReadback(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "1", "FAKECUDA_COPY_DELAY_US": "1000"})
	onDevice(t, d, 0)
	p, err := d.MemAlloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(p)
	buf, err := d.MemHostAlloc(64<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFreeHost(buf)
	s, err := d.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(s)
	ev, err := d.EventCreate(EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	defer d.EventDestroy(ev)
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i % 251)
	}
	if err := d.MemcpyHtoDAsync(p+4096, buf, 100, 5000, s); err != nil {
		t.Fatal(err)
	}
	if err := d.EventRecord(ev, s); err != nil {
		t.Fatal(err)
	}
	if err := d.EventSynchronize(ev); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5000)
	if err := d.MemcpyDtoH(got, p+4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf.Bytes()[100:5100]) {
		t.Fatal("readback differs from the copied bytes")
	}
	if err := d.MemcpyHtoDAsync(p, buf, 60<<10, 8<<10, s); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("copy past the staging buffer = %v, want ErrInvalidArgument", err)
	}
	base, size, err := d.MemGetAddressRange(p + 12345)
	if err != nil || base != p || size != 1<<20 {
		t.Fatalf("MemGetAddressRange = %#x %d %v", base, size, err)
	}
	free, total, err := d.MemGetInfo()
	if err != nil || total != 1<<30 || free != total-(2<<20) {
		t.Fatalf("MemGetInfo = %d/%d %v (one 2 MiB granule used)", free, total, err)
	}
}

func TestIPCAcrossProcesses(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "1"})
	onDevice(t, d, 0)
	const size = 3 << 20
	p, err := d.MemAlloc(size)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := copyIn(d, p, size, func(i int) byte { return byte(i * 7) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFreeHost(buf)
	h, err := d.IpcGetMemHandle(p)
	if err != nil {
		t.Fatal(err)
	}
	// The exporting process cannot open its own handle.
	var ce *Error
	if _, err := d.IpcOpenMemHandle(h, IPCMemLazyEnablePeer); !errors.As(err, &ce) || ce.Code != ErrorInvalidContext {
		t.Fatalf("same-process open = %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	out := runHelper(t, d.Path(), "open", hex.EncodeToString(h[:]), fmt.Sprint(size))
	if strings.TrimSpace(out) != hex.EncodeToString(sum[:]) {
		t.Fatalf("child read sha256 %s, want %x", out, sum)
	}
	if err := d.MemFree(p); err != nil {
		t.Fatal(err)
	}
	// After Free the handle is stale.
	out = runHelper(t, d.Path(), "open", hex.EncodeToString(h[:]), fmt.Sprint(size))
	if !strings.Contains(out, "CUDA_ERROR_INVALID_VALUE") {
		t.Fatalf("opening a freed allocation's handle: %q, want CUDA_ERROR_INVALID_VALUE", out)
	}
}

func runHelper(t *testing.T, lib string, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"="+lib)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %v: %v\n%s", args, err, b)
	}
	return string(b)
}

// copyIn copies size bytes of pattern into device memory at p through a
// pinned buffer and a stream of its own, and returns the buffer (the
// caller frees it).
func copyIn(d *Driver, p DevicePtr, size int, pattern func(i int) byte) (HostBuffer, error) {
	buf, err := d.MemHostAlloc(size, 0)
	if err != nil {
		return buf, err
	}
	for i := range buf.Bytes() {
		buf.Bytes()[i] = pattern(i)
	}
	s, err := d.StreamCreate(StreamNonBlocking)
	if err != nil {
		return buf, err
	}
	defer d.StreamDestroy(s)
	if err := d.MemcpyHtoDAsync(p, buf, 0, size, s); err != nil {
		return buf, err
	}
	return buf, d.StreamSynchronize(s)
}

// helperDriver opens and initialises the driver library helperEnv names,
// in a child process, and makes device 0's primary context current on the
// locked calling thread.
func helperDriver() (*Driver, Device, error) {
	d, err := Open(os.Getenv(helperEnv))
	if err == nil {
		err = d.Init()
	}
	if err != nil {
		return nil, 0, err
	}
	runtime.LockOSThread()
	dev, err := d.DeviceGet(0)
	if err != nil {
		return nil, 0, err
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err == nil {
		err = d.CtxSetCurrent(ctx)
	}
	return d, dev, err
}

// helperMain runs in a child process: "open <hex handle> <size>" opens the
// handle twice (refcounted), prints the sha256 of its bytes, closes twice.
func helperMain() int {
	if os.Args[len(os.Args)-1] == "export" {
		return exportHelper()
	}
	if os.Args[len(os.Args)-2] == "vmm-import" {
		return vmmImportHelper(os.Args[len(os.Args)-1])
	}
	args := os.Args[len(os.Args)-3:]
	d, _, err := helperDriver()
	if err != nil {
		fmt.Println(err)
		return 0
	}
	var h IPCHandle
	raw, _ := hex.DecodeString(args[1])
	copy(h[:], raw)
	var size int
	fmt.Sscan(args[2], &size)
	p1, err := d.IpcOpenMemHandle(h, IPCMemLazyEnablePeer)
	if err != nil {
		fmt.Println(err)
		return 0
	}
	p2, err := d.IpcOpenMemHandle(h, IPCMemLazyEnablePeer)
	if err != nil || p2 != p1 {
		fmt.Println("second open:", p1, p2, err)
		return 1
	}
	b := make([]byte, size)
	if err := d.MemcpyDtoH(b, p1); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := d.IpcCloseMemHandle(p1); err != nil {
		fmt.Println("close 1:", err)
		return 1
	}
	if err := d.MemcpyDtoH(b[:1], p1); err != nil {
		fmt.Println("mapping gone after the first of two closes:", err)
		return 1
	}
	if err := d.IpcCloseMemHandle(p2); err != nil {
		fmt.Println("close 2:", err)
		return 1
	}
	sum := sha256.Sum256(b)
	fmt.Println(hex.EncodeToString(sum[:]))
	return 0
}
