package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
)

// TestMaxBytes (issue 25, item 2): Status reports the device memory held as
// the sum of the backend's arena sizes (the mock's allocation files); a
// --model load and a publish that would pass --max-bytes are refused before
// anything is allocated (no new allocation file), naming the numbers, and
// the daemon that serves keeps serving the same bytes.
func TestMaxBytes(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2, Env: []string{"WCACHE_MOCK_HANDLE=posix-shm"}})
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{Shards: 2})
	h.startServe(0, model.Dir)

	st := h.clientStatus(0)
	arenas := h.shmFiles()
	var sum uint64
	for _, f := range arenas {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		sum += uint64(fi.Size())
	}
	if len(arenas) == 0 || st.DeviceBytesTotal != sum || st.DeviceBytes != sum || st.StartPhases.BytesAllocated != sum {
		t.Fatalf("device bytes: status %d (generation %d, start %d), the backend's %d arenas hold %d",
			st.DeviceBytesTotal, st.DeviceBytes, st.StartPhases.BytesAllocated, len(arenas), sum)
	}
	var rows []struct {
		DeviceUUID       string `json:"device_uuid"`
		DeviceBytesTotal uint64 `json:"device_bytes_total"`
	}
	if res := h.mustRun("status", "--json"); json.Unmarshal([]byte(res.Stdout), &rows) != nil || len(rows) != 1 ||
		rows[0].DeviceUUID != h.UUIDs[0] || rows[0].DeviceBytesTotal != sum {
		t.Fatalf("status --json: want device_bytes_total %d for %s\n%s", sum, h.UUIDs[0], res)
	}
	if st.DeviceBytes < st.Bytes {
		t.Fatalf("device bytes %d below the tensor bytes %d", st.DeviceBytes, st.Bytes)
	}

	// A load past the cap: refused before the lock (so --force ends nothing)
	// and before any allocation.
	limit := fmt.Sprint(sum - 1)
	res := h.run(serveArgs(0, model.Dir, "--force", "--max-bytes", limit)...)
	if res.Code != 1 || !strings.Contains(res.Stderr, "--max-bytes") || !strings.Contains(res.Stderr, fmt.Sprint(sum)) ||
		!strings.Contains(res.Stderr, limit) {
		t.Fatalf("serve --max-bytes %s of a %d-byte plan: want a refusal naming both\n%s", limit, sum, res)
	}
	if got := h.shmFiles(); len(got) != len(arenas) {
		t.Fatalf("a refused load allocated: %d arena files, had %d", len(got), len(arenas))
	}
	if again := h.clientStatus(0); again.State != "serving" || again.Generation != st.Generation || again.DeviceBytesTotal != sum {
		t.Fatalf("the serving daemon after a refused load: %+v", again)
	}
	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--verify")

	// A publish past the cap: RESOURCE_EXHAUSTED, nothing allocated, the
	// daemon empty and publishable again.
	h.startEmpty(1, "--max-bytes", "4096")
	if st := h.clientStatus(1); st.MaxBytes != 4096 || st.DeviceBytesTotal != 0 {
		t.Fatalf("status of an empty daemon with --max-bytes 4096: max %d, held %d", st.MaxBytes, st.DeviceBytesTotal)
	}
	c := h.mustDialGo(1)
	_, err := c.Publish(context.Background(), helperPublication(), client.ShmFill(func(int, []byte) error { return nil }, false))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-bytes") ||
		!strings.Contains(err.Error(), "4096") {
		t.Fatalf("publish of the helper table (over 4096 bytes of arenas) past --max-bytes 4096: %v, want RESOURCE_EXHAUSTED naming the numbers", err)
	}
	if got := h.shmFiles(); len(got) != len(arenas) {
		t.Fatalf("a refused publish allocated: %d arena files, had %d", len(got), len(arenas))
	}
	if st := h.clientStatus(1); st.State != "empty" || st.DeviceBytesTotal != 0 {
		t.Fatalf("daemon after a refused publish: state %s, held %d", st.State, st.DeviceBytesTotal)
	}
	res = h.run("publish", "--backend", "mock", "--gpu-id", "1", "--model", model.Dir)
	if res.Code != 1 || !strings.Contains(res.Stderr, "--max-bytes") || !strings.Contains(res.Stderr, "ResourceExhausted") {
		t.Fatalf("wcache publish past --max-bytes: want a refusal naming the flag\n%s", res)
	}
}

// TestReserveBytes: with the backend reporting free memory (the mock: its
// capacity less what it holds), a publish that would leave less than
// --reserve-bytes free is refused the same way, naming the free memory.
func TestReserveBytes(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1, Env: []string{"WCACHE_MOCK_HANDLE=posix-shm", "WCACHE_MOCK_MEMORY=64MiB"}})
	h.startEmpty(0, "--reserve-bytes", "64MiB")
	c := h.mustDialGo(0)
	_, err := c.Publish(context.Background(), helperPublication(), client.ShmFill(func(int, []byte) error { return nil }, false))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--reserve-bytes") ||
		!strings.Contains(err.Error(), fmt.Sprint(64<<20)) {
		t.Fatalf("publish into a device whose free memory is all reserved: %v, want RESOURCE_EXHAUSTED naming it", err)
	}
	if len(h.shmFiles()) != 0 {
		t.Fatalf("a refused publish allocated: %v", h.shmFiles())
	}
}

// clientStatus is the Go client's Status of the daemon of mock GPU gpu.
func (h *harness) clientStatus(gpu int) *client.Status {
	h.t.Helper()
	st, err := h.Status(context.Background(), h.UUIDs[gpu])
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// TestMaxBytesAsAPercentage: serve --max-bytes 50% caps the daemon at half
// the device's total memory as the backend reports it (the mock: its
// WCACHE_MOCK_MEMORY), shown in Status; a bad percentage exits 2.
func TestMaxBytesAsAPercentage(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1, Env: []string{"WCACHE_MOCK_MEMORY=64MiB"}})
	if res := h.run("serve", "--backend", "mock", "--gpu-id", "0", "--max-bytes", "120%"); res.Code != 2 || !strings.Contains(res.Stderr, "percentage") {
		t.Fatalf("serve --max-bytes 120%%: want exit 2 naming the percentage\n%s", res)
	}
	h.startEmpty(0, "--max-bytes", "50%")
	if st := h.clientStatus(0); st.MaxBytes != 32<<20 {
		t.Fatalf("status with --max-bytes 50%% of 64 MiB: max %d, want %d", st.MaxBytes, 32<<20)
	}
}
