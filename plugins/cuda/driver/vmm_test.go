package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/wcache/wcache/sdk"
)

func TestVMMExportImportAcrossProcesses(t *testing.T) {
	d := openFake(t, fakeLib(""), map[string]string{"FAKECUDA_DEVICES": "1"})
	onDevice(t, d, 0)
	if !d.HasVMM() {
		t.Fatal("HasVMM = false on the fake driver")
	}
	dev, _ := d.DeviceGet(0)
	g, err := d.MemGetAllocationGranularity(dev, GranularityMinimum)
	if err != nil || g != 2<<20 {
		t.Fatalf("granularity = %d, %v; want 2 MiB", g, err)
	}
	var ce *Error
	if _, err := d.MemCreate(dev, g+4096); !errors.As(err, &ce) || ce.Code != ErrorInvalidValue || !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("MemCreate of a size off the granularity = %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
	const size = 4 << 20
	h, err := d.MemCreate(dev, size)
	if err != nil {
		t.Fatal(err)
	}
	va, err := d.MemAddressReserve(size, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.MemMap(va, size, 0, h); err != nil {
		t.Fatal(err)
	}
	probe := make([]byte, 16)
	if err := d.MemcpyDtoH(probe, va); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("read before cuMemSetAccess = %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
	if err := d.MemSetAccess(va, size, dev, MemAccessReadWrite); err != nil {
		t.Fatal(err)
	}
	buf, err := copyIn(d, va, size, func(i int) byte { return byte(i*13 + i>>12) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFreeHost(buf)
	if _, err := d.IpcGetMemHandle(va); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("legacy IPC of a VMM mapping = %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
	if base, n, err := d.MemGetAddressRange(va + 5); err != nil || base != va || n != size {
		t.Fatalf("MemGetAddressRange = %#x %d %v", base, n, err)
	}
	f, err := d.MemExportFD(h)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := d.MemAddressFree(va, size); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("cuMemAddressFree with a mapping left = %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
	// Importing in the exporting process maps the same memory.
	h2, err := d.MemImportFD(f)
	if err != nil {
		t.Fatal(err)
	}
	va2, _ := d.MemAddressReserve(size, 0)
	if err := d.MemMap(va2, size, 0, h2); err != nil {
		t.Fatal(err)
	}
	if err := d.MemSetAccess(va2, size, dev, MemAccessReadWrite); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyDtoH(probe, va2+100); err != nil || string(probe) != string(buf.Bytes()[100:116]) {
		t.Fatalf("second mapping reads %x, %v", probe, err)
	}
	for _, err := range []error{d.MemUnmap(va2, size), d.MemAddressFree(va2, size), d.MemRelease(h2)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Unmapped and released here: the exported descriptor alone keeps the
	// memory, and a second process maps the same bytes through it.
	for _, err := range []error{d.MemUnmap(va, size), d.MemAddressFree(va, size), d.MemRelease(h)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if free, total, err := d.MemGetInfo(); err != nil || free != total {
		t.Fatalf("MemGetInfo after release = %d/%d, %v: the device memory is not given back", free, total, err)
	}
	if err := d.MemRelease(h); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("second cuMemRelease = %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	cmd := exec.Command(os.Args[0], "-test.run=^$", "vmm-import", strconv.Itoa(size))
	cmd.Env = append(os.Environ(), helperEnv+"="+d.Path())
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if want := hex.EncodeToString(sum[:]) + "\nwrite through the read-only import refused"; err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("child read %q (%v), want sha256 %x and its write refused", out, err, sum)
	}

	// A descriptor that is not a VMM export is refused.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := d.MemImportFD(r); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("import of a pipe = %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
}

// vmmImportHelper runs in a child process: it imports descriptor 3, maps
// size bytes of it read-only and prints their sha256, then tries to write
// through the mapping and prints that the write was refused.
func vmmImportHelper(sizeArg string) int {
	size, _ := strconv.Atoi(sizeArg)
	d, dev, err := helperDriver()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	f := os.NewFile(3, "cuda-vmm-fd")
	h, err := d.MemImportFD(f)
	f.Close()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	va, err := d.MemAddressReserve(uint64(size), 0)
	if err == nil {
		err = d.MemMap(va, uint64(size), 0, h)
	}
	if err == nil {
		err = d.MemSetAccess(va, uint64(size), dev, MemAccessRead)
	}
	b := make([]byte, size)
	if err == nil {
		err = d.MemcpyDtoH(b, va)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	sum := sha256.Sum256(b)
	fmt.Println(hex.EncodeToString(sum[:]))
	// An importer that maps read-only cannot write through its mapping:
	// the fake refuses the copy as the real driver does.
	buf, err := copyIn(d, va, 4096, func(i int) byte { return byte(i) })
	if buf.Bytes() != nil {
		defer d.MemFreeHost(buf)
	}
	if !errors.Is(err, sdk.ErrInvalidArgument) {
		fmt.Printf("a write through the read-only import: %v, want CUDA_ERROR_INVALID_VALUE\n", err)
		return 1
	}
	fmt.Println("write through the read-only import refused")
	return 0
}
