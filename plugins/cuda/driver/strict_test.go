package driver

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/sdk"
)

func TestResolverPinsTheCUDA12ABI(t *testing.T) {
	// The fake's cuGetProcAddress hands out a stand-in for a changed
	// CUDA 13 cuMemGetInfo at versions >= 13000: MemGetInfo working proves
	// the entry points were asked for at 12000.
	for variant, want := range map[string]string{"": ResolverProcAddressV2, "noproc": ResolverDlsym} {
		t.Run(want, func(t *testing.T) {
			d := openFake(t, fakeLib(variant), map[string]string{"FAKECUDA_DEVICES": "MIG-00112233445566778899aabbccddeeff"})
			if d.Resolver() != want || len(d.FellBack()) != 0 {
				t.Fatalf("Resolver = %q, FellBack = %v; want %q and none", d.Resolver(), d.FellBack(), want)
			}
			if v, err := d.Version(); err != nil || v != 13000 {
				t.Fatalf("Version = %d, %v; want 13000 (driver 580)", v, err)
			}
			onDevice(t, d, 0)
			if free, total, err := d.MemGetInfo(); err != nil || free != total {
				t.Fatalf("MemGetInfo = %d/%d, %v", free, total, err)
			}
			// v2 is the MIG UUID, v1 (asked for at 9020) the physical GPU.
			v2, err := d.DeviceUUID(0)
			if err != nil || v2.Hex() != "00112233-4455-6677-8899-aabbccddeeff" {
				t.Fatalf("DeviceUUID = %s, %v", v2.Hex(), err)
			}
			v1, err := d.DeviceUUIDV1(0)
			if err != nil || v1.Hex() != "ffeeddcc-bbaa-9988-7766-554433221100" {
				t.Fatalf("DeviceUUIDV1 = %s, %v", v1.Hex(), err)
			}
		})
	}
}

func TestStickyErrorLatches(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "sticky")
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "1", "FAKECUDA_STICKY_FILE": trigger})
	onDevice(t, d, 0)
	p, err := d.MemAlloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if d.Sticky() != nil {
		t.Fatalf("Sticky = %v before any sticky error", d.Sticky())
	}
	select {
	case <-d.StickyDone():
		t.Fatal("StickyDone closed before any sticky error")
	default:
	}
	if err := os.WriteFile(trigger, []byte("700\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = d.MemAlloc(1 << 20)
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != ErrorIllegalAddress || !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("MemAlloc after the fault = %v, want CUDA_ERROR_ILLEGAL_ADDRESS wrapping ErrUnavailable", err)
	}
	if err := os.Remove(trigger); err != nil {
		t.Fatal(err)
	}
	// It sticks: every later call fails the same way.
	if err := d.MemFree(p); !errors.As(err, &ce) || ce.Code != ErrorIllegalAddress {
		t.Fatalf("MemFree after a sticky error = %v, want 700 again", err)
	}
	if _, err := d.DeviceAttribute(AttrComputeMode, 0); !errors.As(err, &ce) || ce.Code != ErrorIllegalAddress {
		t.Fatalf("DeviceAttribute after a sticky error = %v, want 700 again", err)
	}
	<-d.StickyDone()
	if s := d.Sticky(); s == nil || s.Code != ErrorIllegalAddress || s.Func != "cuMemAlloc_v2" {
		t.Fatalf("Sticky = %v, want the first failure (cuMemAlloc_v2, 700)", s)
	}
	for _, c := range []Result{214, 700, 719, 999} {
		if !c.Sticky() {
			t.Errorf("Result(%d).Sticky() = false", c)
		}
	}
	for _, c := range []Result{ErrorOutOfMemory, ErrorInvalidValue, ErrorInvalidContext} {
		if c.Sticky() {
			t.Errorf("Result(%d).Sticky() = true", c)
		}
	}
}

func TestLastPrimaryReleaseDestroysTheContext(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "1"})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := d.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CtxSetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := d.MemAlloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.PrimaryCtxRelease(0); err != nil {
		t.Fatal(err)
	}
	var ce *Error
	if _, err := d.MemAlloc(1 << 20); !errors.As(err, &ce) || ce.Code != ErrorContextIsDestroyed {
		t.Fatalf("MemAlloc in a released context = %v, want CUDA_ERROR_CONTEXT_IS_DESTROYED", err)
	}
	// A new retain is a fresh context without the old allocation.
	if ctx, err = d.PrimaryCtxRetain(0); err != nil {
		t.Fatal(err)
	}
	defer d.PrimaryCtxRelease(0)
	if err := d.CtxSetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.MemGetAddressRange(p); !errors.As(err, &ce) || ce.Code != ErrorNotFound {
		t.Fatalf("old allocation after the context died = %v, want CUDA_ERROR_NOT_FOUND", err)
	}
	if free, total, err := d.MemGetInfo(); err != nil || free != total {
		t.Fatalf("MemGetInfo = %d/%d %v; the dead context's memory must be back", free, total, err)
	}
}

func TestMappingDiesWithItsExporter(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "1"})
	cmd := exec.Command(os.Args[0], "-test.run=^$", "export")
	cmd.Env = append(os.Environ(), helperEnv+"="+d.Path())
	cmd.Stderr = os.Stderr
	stdin, stdout := childproc.StartPiped(t, cmd)
	line, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("exporter: %v (%q)", err, line)
	}
	var h IPCHandle
	raw, err := hex.DecodeString(strings.TrimSpace(line))
	if err != nil || len(raw) != IPCHandleSize {
		t.Fatalf("exporter printed %q", line)
	}
	copy(h[:], raw)
	onDevice(t, d, 0)
	p, err := d.IpcOpenMemHandle(h, IPCMemLazyEnablePeer)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4096)
	if err := d.MemcpyDtoH(b, p); err != nil || b[0] != 0x5a {
		t.Fatalf("read while the exporter lives: %v, byte %#x", err, b[0])
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exporter: %v", err)
	}
	var ce *Error
	if err := d.MemcpyDtoH(b, p); !errors.As(err, &ce) || ce.Code != ErrorIllegalAddress {
		t.Fatalf("read after the exporter exited = %v, want CUDA_ERROR_ILLEGAL_ADDRESS", err)
	}
	if d.Sticky() == nil {
		t.Fatal("the fault did not stick")
	}
}

// exportHelper allocates 2 MiB filled with 0x5a, prints its IPC handle in
// hex and exits when stdin closes.
func exportHelper() int {
	d, _, err := helperDriver()
	const size = 2 << 20
	var p DevicePtr
	if err == nil {
		p, err = d.MemAlloc(size)
	}
	if err == nil {
		_, err = copyIn(d, p, size, func(int) byte { return 0x5a })
	}
	var h IPCHandle
	if err == nil {
		h, err = d.IpcGetMemHandle(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(hex.EncodeToString(h[:]))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}
