package e2e

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk/names"
)

// TestPublishTableValidatedBeforeAllocation: tables whose views leave
// their storage, whose strides are negative or whose sizes overflow, with
// a dtype outside the vocabulary or an unbounded name, dtype or metadata,
// are refused with INVALID_ARGUMENT naming the problem before anything is
// allocated (the fill never runs, no allocation file appears) and the
// daemon is empty again; a good table then publishes.
func TestPublishTableValidatedBeforeAllocation(t *testing.T) {
	h := newHarness(t, shmFileHarness)
	h.startEmpty(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.BySocket(h.Paths(h.UUIDs[0]).Socket), client.Options{ClientName: "table"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	layout := func(strides ...int64) *client.Layout { return &client.Layout{Storage: "s", Strides: strides} }
	cases := []struct {
		name string
		spec client.TensorSpec
		md   map[string]string
		says string
	}{
		{"view outside its storage", client.TensorSpec{Name: "w", DType: "F32", Shape: []uint64{800}, Length: 16, Layout: layout(1)}, nil, "reaches byte 3200 of a 16-byte storage"},
		{"negative stride", client.TensorSpec{Name: "w", DType: "F32", Shape: []uint64{4}, Length: 16, Layout: layout(-1)}, nil, "negative"},
		{"storage offset outside", client.TensorSpec{Name: "w", DType: "F32", Shape: []uint64{4}, Length: 16,
			Layout: &client.Layout{Storage: "s", Strides: []int64{1}, StorageOffset: 1}}, nil, "reaches byte 20"},
		{"overflow", client.TensorSpec{Name: "w", DType: "F32", Shape: []uint64{1 << 40, 1 << 40}, Length: 16, Layout: layout(1<<40, 1)}, nil, "overflow"},
		{"torch dtype too large", client.TensorSpec{Name: "w", DType: "torch.complex128", Shape: []uint64{200}, Length: 16}, nil, "reaches byte 3200"},
		{"misspelt dtype", client.TensorSpec{Name: "w", DType: "bflaot16", Shape: []uint64{8}, Length: 16}, nil, `dtype "bflaot16"`},
		{"long dtype", client.TensorSpec{Name: "w", DType: strings.Repeat("F", 100_000), Shape: []uint64{8}, Length: 16}, nil, "100000 bytes"},
		{"long name", client.TensorSpec{Name: strings.Repeat("n", 1000<<10), DType: "U8", Shape: []uint64{16}, Length: 16}, nil, "name of 1024000 bytes"},
		{"large metadata", client.TensorSpec{Name: "w", DType: "U8", Shape: []uint64{16}, Length: 16}, map[string]string{"k": strings.Repeat("v", 300<<10)}, "metadata of"},
	}
	pub := helperPublication()
	for _, tc := range cases {
		p := client.Publication{Config: pub.Config, Tensors: []client.TensorSpec{tc.spec}, Metadata: tc.md}
		filled := false
		_, err := c.Publish(ctx, p, func(context.Context, *client.PublishPlan) ([][]byte, error) {
			filled = true
			return nil, nil
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT saying %q", tc.name, err, tc.says)
		}
		if len(err.Error()) > 2000 {
			t.Errorf("%s: a %d-byte error echoes the input", tc.name, len(err.Error()))
		}
		if filled || len(h.shmFiles()) != 0 {
			t.Errorf("%s: refused after allocating (fill ran: %v, files %v)", tc.name, filled, h.shmFiles())
		}
		h.waitState(h.UUIDs[0], "empty")
	}
	if _, err := c.Publish(ctx, pub, client.ShmFill(func(i int, dst []byte) error { return nil }, false)); err != nil {
		t.Fatalf("a good table after the refusals: %v", err)
	}
}

// TestAttachSaysWhichHandleKindsItMaps: a client that lists the kinds it
// maps gets a daemon whose handles are of another kind refused before a
// lease exists, with a *HandleKindsError naming both sides and the
// backend option that exports a kind it maps; a client that lists the
// daemon's kind, or lists nothing, attaches.
func TestAttachSaysWhichHandleKindsItMaps(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	h.startServe(0, model.Dir)
	sock := client.BySocket(h.Paths(h.UUIDs[0]).Socket)
	cfg := clientConfig(t, model.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := client.Attach(ctx, sock, cfg, client.Options{HandleKinds: []string{names.KindPosixShm}})
	var hk *client.HandleKindsError
	if !errors.As(err, &hk) || !slices.Equal(hk.Daemon, []string{names.KindMemfd}) ||
		!slices.Equal(hk.Client, []string{names.KindPosixShm}) || !strings.Contains(err.Error(), "handle=posix-shm") {
		t.Fatalf("a posix-shm-only client against memfd handles: %v, want a *HandleKindsError naming memfd and handle=posix-shm", err)
	}
	if r := h.status(h.UUIDs[0]); r.State != "serving" {
		t.Fatalf("status after the refusal: %+v", r)
	}
	for _, kinds := range [][]string{nil, client.DefaultMappers().Kinds()} {
		att, err := client.Attach(ctx, sock, cfg, client.Options{HandleKinds: kinds})
		if err != nil {
			t.Fatalf("kinds %v: %v", kinds, err)
		}
		if _, err := client.Verify(ctx, att.Manifest, safetensorstest.Open(t, model.Dir), client.VerifyOptions{}); err != nil {
			t.Errorf("kinds %v: %v", kinds, err)
		}
		att.Lease.Close()
	}
}
