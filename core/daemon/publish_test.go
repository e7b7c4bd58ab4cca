package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/sdk/backendtest"
)

// startEmpty starts a daemon without a model. It allows content policy
// "headers": the publications of these tests (publication()) name no
// files, and only such a daemon answers an attach that proves none
// (contentproof.go); edit may take it back.
func (f *fixture) startEmpty(edit func(*Options)) *running {
	f.t.Helper()
	return f.start(0, func(o *Options) {
		o.Model = ""
		allowHeaders(o)
		if edit != nil {
			edit(o)
		}
	})
}

// publication is a small table: a tensor of its own, two views of one
// storage and metadata; fillBytes gives each distinct range its bytes.
func publication() client.Publication {
	cfg := cacheconfig.Default()
	cfg.Model = "org/model"
	cfg.EngineName, cfg.EngineVersion = "testengine", "1.0"
	cfg.DeviceCapability = "mock" // what an engine sets; attaches compare it
	return client.Publication{Config: cfg, Metadata: map[string]string{"quant": "fp8"},
		Tensors: []client.TensorSpec{
			{Name: "a", DType: "F32", Shape: []uint64{2, 3}, Length: 24},
			{Name: "qkv.q", DType: "BF16", Shape: []uint64{2, 2}, Length: 32,
				Layout: &client.Layout{Storage: "s", Strides: []int64{1, 2}, StorageOffset: 0}},
			{Name: "qkv.k", DType: "BF16", Shape: []uint64{2, 2}, Length: 32,
				Layout: &client.Layout{Storage: "s", Strides: []int64{2, 1}, StorageOffset: 8}},
		}}
}

func fillBytes(i int, dst []byte) error {
	for j := range dst {
		dst[j] = byte(i*31 + j)
	}
	return nil
}

// emptyDaemon starts a daemon without a model, the one a publish fills,
// and dials it.
func emptyDaemon(t *testing.T) (*fixture, *running, *client.Client) {
	t.Helper()
	f := newFixture(t)
	r := f.startEmpty(nil)
	return f, r, r.dial(t)
}

func TestEmptyDaemonPublishThenAttach(t *testing.T) {
	_, r, c := emptyDaemon(t)
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil || st.State != "empty" || st.Tensors != 0 {
		t.Fatalf("status of an empty daemon = %+v, %v", st, err)
	}
	pub := publication()
	_, err = client.Attach(ctx, client.BySocket(r.d.Info().Paths.Socket), pub.Config, client.Options{})
	var ee *client.EmptyError
	if !errors.Is(err, client.ErrEmpty) || !errors.As(err, &ee) || ee.Publishing {
		t.Fatalf("attach to an empty daemon = %v, want *EmptyError (ErrEmpty)", err)
	}

	res, err := c.Publish(ctx, pub, client.ShmFill(fillBytes, true))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if res.Tensors != 3 || res.Bytes != 56 || res.Verified {
		t.Errorf("publish result = %+v, want 3 tensors, 56 bytes (the storage once), not verified", res)
	}
	st, _ = c.Status(ctx)
	if st.State != "serving" || st.Metadata["quant"] != "fp8" || st.ConfigDigest != res.ConfigDigest {
		t.Errorf("status after publish = %+v", st)
	}

	a, err := client.Attach(ctx, client.BySocket(r.d.Info().Paths.Socket), pub.Config, client.Options{})
	if err != nil {
		t.Fatalf("attach after publish: %v", err)
	}
	defer a.Lease.Close()
	m := a.Manifest
	if m.Metadata["quant"] != "fp8" || m.Generation != res.Generation || len(m.Tensors) != 3 {
		t.Fatalf("manifest = %+v", m)
	}
	q, k := m.Tensors[1], m.Tensors[2]
	if q.Offset != k.Offset || q.Handle != k.Handle || k.Layout == nil || k.Layout.StorageOffset != 8 ||
		k.Layout.Strides[0] != 2 || q.Layout.Storage != "s" {
		t.Errorf("views of one storage: %+v %+v, %+v %+v", q, q.Layout, k, k.Layout)
	}
	// The bytes a reader maps read-only are those the publisher wrote.
	h := m.Handles[0]
	mem, err := client.MapShm(string(h.Data), h.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Unmap(mem)
	for i, tn := range m.Tensors {
		want := make([]byte, tn.Length)
		src := i
		if i == 2 {
			src = 1 // the storage was filled once, for its first tensor
		}
		_ = fillBytes(src, want)
		if !bytes.Equal(mem[tn.Offset:tn.Offset+tn.Length], want) {
			t.Errorf("tensor %s: bytes differ", tn.Name)
		}
	}

	// A client of another rank is refused field by field.
	other := pub.Config
	other.TPSize, other.TPRank = 2, 1
	_, err = client.Attach(ctx, client.BySocket(r.d.Info().Paths.Socket), other, client.Options{})
	if me, ok := client.IsMismatch(err); !ok || len(me.Diffs) != 2 {
		t.Errorf("attach with tp_rank 1 = %v, want a mismatch on tp_size and tp_rank", err)
	}
	// A second publish is refused while weights are held.
	if _, err := c.Publish(ctx, pub, client.ShmFill(fillBytes, false)); !errors.Is(err, client.ErrHoldsWeights) {
		t.Errorf("publish over weights = %v, want ErrHoldsWeights", err)
	}
}

func TestPublishAbortedLeavesNothing(t *testing.T) {
	f, r, c := emptyDaemon(t)
	pub := publication()
	inFill := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, pub, func(ctx context.Context, _ *client.PublishPlan) ([][]byte, error) {
			close(inFill)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		errc <- err
	}()
	<-inFill
	if n := len(backendtest.ShmFiles(t, f.shm)); n != 1 {
		t.Fatalf("%d allocation files during the publish, want 1", n)
	}
	// A second publisher is told who is publishing; an attacher that the
	// daemon is empty.
	c2 := r.dial(t)
	_, err := c2.Publish(context.Background(), pub, client.ShmFill(fillBytes, false))
	var pc *client.PublishConflictError
	if !errors.Is(err, client.ErrPublishInProgress) || !errors.As(err, &pc) || pc.PublisherPID != int32(os.Getpid()) {
		t.Errorf("concurrent publish = %v, want ErrPublishInProgress naming pid %d", err, os.Getpid())
	}
	_, err = client.Attach(context.Background(), client.BySocket(r.d.Info().Paths.Socket), pub.Config, client.Options{})
	var ee *client.EmptyError
	if !errors.As(err, &ee) || !ee.Publishing || ee.PublisherPID != int32(os.Getpid()) {
		t.Errorf("attach during a publish = %v, want *EmptyError naming the publisher", err)
	}
	if _, _, err := c2.Evict(context.Background(), time.Second); !errors.Is(err, client.ErrPublishInProgress) {
		t.Errorf("evict during a publish = %v, want ErrPublishInProgress", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled publish = %v", err)
	}
	waitFor(t, "the daemon to be empty again", func() bool { return r.d.State() == StateEmpty })
	waitFor(t, "the allocation to be freed", func() bool { return len(backendtest.ShmFiles(t, f.shm)) == 0 })
	if _, err := c2.Publish(context.Background(), pub, client.ShmFill(fillBytes, false)); err != nil {
		t.Fatalf("publish after an aborted one: %v", err)
	}
}

func TestVerifyPublish(t *testing.T) {
	f := newFixture(t)
	r := f.startEmpty(func(o *Options) { o.VerifyPublish = true })
	c := r.dial(t)
	pub := publication()
	ctx := context.Background()
	if _, err := c.Publish(ctx, pub, client.ShmFill(fillBytes, false)); status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Errorf("publish without digests = %v, want INVALID_ARGUMENT", err)
	}
	wrong := func(ctx context.Context, p *client.PublishPlan) ([][]byte, error) {
		sums, err := client.ShmFill(fillBytes, true)(ctx, p)
		if err == nil {
			bad := sha256.Sum256([]byte("not it"))
			sums[0] = bad[:]
		}
		return sums, err
	}
	_, err := c.Publish(ctx, pub, wrong)
	if status.Code(errors.Unwrap(err)) != codes.DataLoss {
		t.Errorf("publish with a wrong digest = %v, want DATA_LOSS", err)
	}
	waitFor(t, "the daemon to be empty again", func() bool { return r.d.State() == StateEmpty })
	res, err := c.Publish(ctx, pub, client.ShmFill(fillBytes, true))
	if err != nil || !res.Verified {
		t.Fatalf("verified publish = %+v, %v", res, err)
	}
}

func TestEvictWaitsForLeases(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	a := r.mustAttach(t)
	c := r.dial(t)
	ctx := context.Background()
	_, _, err := c.Evict(ctx, 200*time.Millisecond)
	if status.Code(errors.Unwrap(err)) != codes.FailedPrecondition || r.d.State() != StateServing {
		t.Fatalf("evict under a lease = %v (state %s), want FAILED_PRECONDITION and serving", err, r.d.State())
	}
	if len(backendtest.ShmFiles(t, f.shm)) == 0 {
		t.Fatal("memory freed under a live lease")
	}
	select { // the timed-out evict's notice
	case <-a.Lease.Notices():
	case <-time.After(5 * time.Second):
		t.Fatal("no drain notice from the evict")
	}
	go func() {
		select {
		case <-a.Lease.Notices():
			a.Lease.Close()
		case <-time.After(5 * time.Second):
		}
	}()
	n, freed, err := c.Evict(ctx, 5*time.Second)
	if err != nil || n != 1 || freed != f.model.TotalBytes {
		t.Fatalf("evict = %d leases, %d bytes, %v", n, freed, err)
	}
	if r.d.State() != StateEmpty || len(backendtest.ShmFiles(t, f.shm)) != 0 {
		t.Errorf("after evict: state %s, %d allocation files", r.d.State(), len(backendtest.ShmFiles(t, f.shm)))
	}
	if _, err := r.attach(t, nil); !errors.Is(err, client.ErrEmpty) {
		t.Errorf("attach after evict = %v, want ErrEmpty", err)
	}
	if _, err := c.Publish(ctx, publication(), client.ShmFill(fillBytes, false)); err != nil {
		t.Errorf("publish after evict: %v", err)
	}
}

// TestPublishLargeTableIsChunked: a table larger than the daemon's 1 MiB
// request limit travels as begin + tensors messages and arrives whole.
func TestPublishLargeTableIsChunked(t *testing.T) {
	_, r, c := emptyDaemon(t)
	pub := publication()
	pub.Tensors = nil
	const n = 12000 // ~100 bytes of name each: over 1 MiB in all
	for i := range n {
		pub.Tensors = append(pub.Tensors, client.TensorSpec{
			Name:  fmt.Sprintf("model.layers.%05d.%s", i, strings.Repeat("x", 80)),
			DType: "U8", Shape: []uint64{16}, Length: 16})
	}
	res, err := c.Publish(context.Background(), pub, client.ShmFill(fillBytes, false))
	if err != nil {
		t.Fatalf("publish of %d tensors: %v", n, err)
	}
	if res.Tensors != n || res.Bytes != 16*n {
		t.Errorf("publish result = %+v, want %d tensors of 16 bytes", res, n)
	}
	a, err := client.Attach(context.Background(), client.BySocket(r.d.Info().Paths.Socket), pub.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Lease.Close()
	if last := a.Manifest.Tensors[n-1]; last.Name != pub.Tensors[n-1].Name {
		t.Errorf("last tensor = %q, want %q", last.Name, pub.Tensors[n-1].Name)
	}
}

// allowHeaders lets o's daemon answer attaches without a content proof
// (--content-policies identity,hash,headers).
func allowHeaders(o *Options) {
	o.ContentPolicies = []cacheconfig.Policy{cacheconfig.PolicyIdentity, cacheconfig.PolicyHash, cacheconfig.PolicyHeaders}
}
