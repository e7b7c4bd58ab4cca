package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// awaitAndAttach sends op ATTACH_WAIT on the descriptor channel of mock GPU
// gpu with a new token, then req with that token as fd_wait_token over
// plain gRPC, and returns the request's answer and the Attach's first
// event or error. The stream stays open (its lease with it) until the
// test ends.
func (h *harness) awaitAndAttach(gpu int, req *daemonv1.AttachRequest) ([]fdchannel.Descriptor, error, *daemonv1.AttachEvent, error) {
	h.t.Helper()
	sock := h.Paths(h.UUIDs[gpu]).Socket
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	h.t.Cleanup(cancel)
	var token [fdchannel.TokenSize]byte
	if _, err := rand.Read(token[:]); err != nil {
		h.t.Fatal(err)
	}
	w, err := fdchannel.Await(ctx, fdchannel.Path(sock), token)
	if err != nil {
		h.t.Fatalf("ATTACH_WAIT: %v", err)
	}
	conn := h.rawConn(gpu)
	h.t.Cleanup(func() { _ = conn.Close() })
	req.FdWaitToken = token[:]
	var ev *daemonv1.AttachEvent
	stream, aerr := daemonv1.NewDaemonClient(conn).Attach(ctx, req)
	if aerr == nil {
		ev, aerr = stream.Recv()
	}
	ds, werr := w.Receive(0)
	return ds, werr, ev, aerr
}

// TestAttachWaitSendsTheLeasesDescriptors: a descriptor channel request of
// op ATTACH_WAIT sent before an Attach is answered with exactly the
// descriptors of the lease that Attach made (one per handle of its
// manifest, of the handle's size), and with StatusNoLease when the Attach
// is refused; the Go client takes this path, and its bytes are the
// checkpoint's.
func TestAttachWaitSendsTheLeasesDescriptors(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
	d := h.startServe(0, model.Dir, "--max-arena-bytes", "65536", "--content-policies", "identity,hash,headers", "--log-level", "debug")
	cfg := clientConfig(t, model.Dir)

	ds, werr, ev, aerr := h.awaitAndAttach(0, &daemonv1.AttachRequest{Config: cfg.ToProto(), TensorTable: true})
	if aerr != nil || werr != nil {
		t.Fatalf("attach: %v; ATTACH_WAIT: %v", aerr, werr)
	}
	defer fdchannel.CloseAll(ds)
	hs := ev.GetManifest().GetHandles()
	if len(hs) < 2 || len(ds) != len(hs) {
		t.Fatalf("got %d descriptors for %d handles; want one per handle, several", len(ds), len(hs))
	}
	for i, d := range ds {
		if int(d.Handle) != i || d.Size != hs[i].GetSize() {
			t.Errorf("descriptor %d: handle %d of %d bytes, manifest handle %d has %d", i, d.Handle, d.Size, i, hs[i].GetSize())
		}
	}

	other := cfg
	other.Revision = "another-revision"
	ds, werr, _, aerr = h.awaitAndAttach(0, &daemonv1.AttachRequest{Config: other.ToProto(), TensorTable: true})
	fdchannel.CloseAll(ds)
	var re *fdchannel.RefusedError
	if status.Code(aerr) != codes.FailedPrecondition || !errors.As(werr, &re) || re.Status != fdchannel.StatusNoLease ||
		!strings.Contains(re.Message, "the attach failed") {
		t.Errorf("refused attach: %v; its ATTACH_WAIT: %v; want FAILED_PRECONDITION and a %q refusal saying the attach failed",
			aerr, werr, fdchannel.StatusNoLease)
	}

	// The Go client sends ATTACH_WAIT first (the daemon's debug log names
	// the op of every answer that sent descriptors), and its mapped bytes
	// are the checkpoint's.
	att := h.attachInProcess(0, model)
	if _, err := client.Verify(context.Background(), att.Manifest, safetensorstest.Open(t, model.Dir), client.VerifyOptions{}); err != nil {
		t.Errorf("verify through the client's descriptors: %v", err)
	}
	sent := func(op string) int {
		n := 0
		for _, line := range strings.Split(d.Stderr(), "\n") {
			if strings.Contains(line, "descriptor channel: descriptors sent:") && strings.Contains(line, " op="+op+" ") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for sent("attach-wait") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the daemon logs after it sent
	}
	if n, l := sent("attach-wait"), sent("lease"); n != 2 || l != 0 {
		t.Errorf("daemon sent descriptors %d times for op attach-wait and %d for op lease; want 2 (the raw attach, the client's) and 0", n, l)
	}
}
