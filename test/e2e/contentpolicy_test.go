package e2e

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// rawAttach makes the Attach RPC of req on the daemon of mock GPU gpu with
// plain gRPC (no wcache client: nothing proves anything unless req says
// so) and returns the first event or the error.
func (h *harness) rawAttach(gpu int, req *daemonv1.AttachRequest) (*daemonv1.AttachEvent, error) {
	h.t.Helper()
	conn := h.rawConn(gpu)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := daemonv1.NewDaemonClient(conn).Attach(ctx, req)
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// rawConn is a plain gRPC connection to the daemon of mock GPU gpu (no
// wcache client, none of its checks), the caller's to close.
func (h *harness) rawConn(gpu int) *grpc.ClientConn {
	h.t.Helper()
	conn, err := grpc.NewClient("unix://"+h.Paths(h.UUIDs[gpu]).Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	return conn
}

// contentRefused returns err's ContentRefused detail (nil without one) and
// fails t unless err is FAILED_PRECONDITION.
func contentRefused(t *testing.T, err error) *daemonv1.ContentRefused {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("want FAILED_PRECONDITION, got %v", err)
	}
	for _, d := range st.Details() {
		if cr, ok := d.(*daemonv1.ContentRefused); ok {
			return cr
		}
	}
	return nil
}

// TestAttachContentProofByTheGenerationsPolicy (issue 35 item 1, the
// daemon's side): two daemons serve m1, one with the default content
// policies (identity, hash) and one that also allows headers. An attach
// that proves nothing (plain gRPC, or a client whose model names no local
// files) gets a lease only from the second; the first refuses it before a
// lease exists with FAILED_PRECONDITION and a ContentRefused detail naming
// the policies and the flag. The Go client, given a same-header copy of m1
// with other bytes as its model, derives its files and never gets m1's
// bytes: a miss under identity, the file named under hash.
func TestAttachContentProofByTheGenerationsPolicy(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	m1 := genModel(t, filepath.Join(h.Root, "m1"), safetensorstest.GenOptions{Shards: 2, HiddenSize: 128})
	h.startServe(0, m1.Dir)
	h.startServe(1, m1.Dir, "--content-policies", "identity,hash,headers")
	cfg := clientConfig(t, m1.Dir)

	// No proof at all: what a client older than the proof sends.
	bare := &daemonv1.AttachRequest{Config: cfg.ToProto(), ClientName: t.Name()}
	_, err := h.rawAttach(0, bare)
	cr := contentRefused(t, err)
	if cr == nil || cr.GetReason() != daemonv1.ContentRefused_REASON_PROOF_REQUIRED ||
		strings.Join(cr.GetPolicies(), ",") != "identity,hash" {
		t.Errorf("no proof, default policies: want REASON_PROOF_REQUIRED with policies identity,hash, got %v (%v)", cr, err)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "content proof required") || !strings.Contains(msg, "--content-policies") {
		t.Errorf("the refusal should say a proof is required and how to allow headers: %q", msg)
	}
	if ev, err := h.rawAttach(1, bare); err != nil || ev.GetManifest() == nil {
		t.Errorf("no proof, a generation that allows headers: want the manifest, got %v", err)
	}
	// An explicit "headers" proof: the policy, refused where not allowed.
	headers := &daemonv1.AttachRequest{Config: cfg.ToProto(), Content: &daemonv1.ContentProof{Policy: "headers"}}
	if cr := contentRefused(t, second(h.rawAttach(0, headers))); cr == nil || cr.GetReason() != daemonv1.ContentRefused_REASON_POLICY {
		t.Errorf("policy headers, default policies: want REASON_POLICY, got %v", cr)
	}
	// A memory copy (successor, sibling) is the daemon's own uid's: this
	// test runs as that uid.
	copyReq := &daemonv1.AttachRequest{Config: cfg.ToProto(), Content: &daemonv1.ContentProof{MemoryCopy: true}}
	if ev, err := h.rawAttach(0, copyReq); err != nil || ev.GetManifest() == nil {
		t.Errorf("memory copy by the owner: want the manifest, got %v", err)
	}

	// The Go client names the files of cfg.Model itself.
	opts := client.Options{ClientName: t.Name(), Content: client.ContentOptions{NoCache: true}}
	attach := func(gpu int, cfg cacheconfig.Config, policy cacheconfig.Policy) (*client.Attachment, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		o := opts
		o.Content.Policy = policy
		a, err := client.Attach(ctx, client.ByDeviceUUID(h.layout(), h.UUIDs[gpu]), cfg, o)
		if err == nil {
			t.Cleanup(func() { a.Lease.Close() })
		}
		return a, err
	}
	if _, err := attach(0, cfg, ""); err != nil {
		t.Fatalf("the daemon's own files: %v", err)
	}
	m2 := filepath.Join(h.Root, "m2")
	zeroed := copyWithATensorZeroed(t, m1.Dir, m2, m1.Files[1])
	fineTune := cfg
	fineTune.Model = m2 // same headers: the same checkpoint_digest
	if got := clientConfig(t, m2).CheckpointDigest; got != cfg.CheckpointDigest {
		t.Fatalf("the copy should have m1's checkpoint digest: %s vs %s", got, cfg.CheckpointDigest)
	}
	var refused *client.ContentRefusedError
	_, err = attach(0, fineTune, "")
	if !errors.Is(err, cacheconfig.ErrContentUnknown) || !errors.As(err, &refused) ||
		refused.Reason != daemonv1.ContentRefused_REASON_UNKNOWN {
		t.Errorf("same-header copy, identity: want the daemon's REASON_UNKNOWN (ErrContentUnknown), got %v", err)
	}
	var mismatch *cacheconfig.ContentMismatchError
	_, err = attach(0, fineTune, cacheconfig.PolicyHash)
	if !errors.As(err, &mismatch) || mismatch.Name != filepath.Base(zeroed) || !errors.As(err, &refused) {
		t.Errorf("same-header copy, hash: want the daemon's mismatch naming %s, got %v", filepath.Base(zeroed), err)
	}
	// The daemon that allows headers still checks the files a client names.
	if _, err := attach(1, fineTune, ""); !errors.Is(err, cacheconfig.ErrContentUnknown) {
		t.Errorf("same-header copy on the daemon allowing headers, identity: want ErrContentUnknown, got %v", err)
	}
	// A model that names no local files: the daemon's policy decides.
	nowhere := cfg
	nowhere.Model = "acme/not-on-this-host"
	if _, err := attach(0, nowhere, ""); !errors.As(err, &refused) || refused.Reason != daemonv1.ContentRefused_REASON_PROOF_REQUIRED {
		t.Errorf("no files, default policies: want REASON_PROOF_REQUIRED, got %v", err)
	}
	if _, err := attach(1, nowhere, ""); err != nil {
		t.Errorf("no files, a generation that allows headers: want a lease, got %v", err)
	}
}

// second returns the error of a (value, error) pair.
func second[T any](_ T, err error) error { return err }

// TestAttachFindsTheGenerationItsFilesProve: several generations × content
// proof. A daemon serving a base model and a same-header fine-tune (one
// config: paths are not compared) answers each client with the generation
// its files prove — not the first whose config matches — and a client
// whose files neither holds is refused.
func TestAttachFindsTheGenerationItsFilesProve(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	base := genModel(t, filepath.Join(h.Root, "base"), safetensorstest.GenOptions{Shards: 2})
	tuned := filepath.Join(h.Root, "tuned")
	copyWithATensorZeroed(t, base.Dir, tuned, base.Files[1])
	h.startServe(0, tuned, "--model", base.Dir)
	other := filepath.Join(h.Root, "other")
	copyWithATensorZeroed(t, base.Dir, other, base.Files[0])

	gens := map[string]uint64{}
	for _, dir := range []string{base.Dir, tuned, base.Dir} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a, err := client.Attach(ctx, client.ByDeviceUUID(h.layout(), h.UUIDs[0]), clientConfig(t, dir),
			client.Options{ClientName: t.Name(), Content: client.ContentOptions{NoCache: true}})
		cancel()
		if err != nil {
			t.Fatalf("attach with the files of %s: %v", dir, err)
		}
		if g, ok := gens[dir]; ok && g != a.Manifest.Generation {
			t.Errorf("%s: generation %d, then %d", dir, g, a.Manifest.Generation)
		}
		gens[dir] = a.Manifest.Generation
		a.Lease.Close()
	}
	if gens[base.Dir] == gens[tuned] {
		t.Errorf("the base model's and the fine-tune's files got one generation (%d)", gens[tuned])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.Attach(ctx, client.ByDeviceUUID(h.layout(), h.UUIDs[0]), clientConfig(t, other),
		client.Options{ClientName: t.Name(), Content: client.ContentOptions{NoCache: true}})
	if !errors.Is(err, cacheconfig.ErrContentUnknown) {
		t.Errorf("files neither generation holds: want ErrContentUnknown, got %v", err)
	}
}
