package client

import (
	"context"
	"errors"
	"fmt"
	"github.com/wcache/wcache/core/fdchannel"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// maxTableChunkBytes bounds the tensor entries of one publish message, well
// under the daemon's 1 MiB request limit.
const maxTableChunkBytes = 512 << 10

// TensorSpec is one entry of a publish's tensor table.
type TensorSpec struct {
	Name string
	// DType uses the safetensors spelling where it has one ("BF16",
	// "F8_E4M3", …), else "torch.<name>" of the vocabulary of
	// core/tensorview; the daemon refuses any other string
	// (docs/publish.md, "Limits and validation").
	DType string
	Shape []uint64
	// Length is the bytes to reserve: the tensor's bytes, or with
	// Layout.Storage the whole storage's bytes.
	Length uint64
	// Layout is optional: tensors naming the same Storage share one range.
	Layout *Layout
}

// Publication is what Publish sends: the identity of the weights, the
// table and a small metadata map returned with every manifest.
type Publication struct {
	// Config names the published weights. Set EngineName and EngineVersion:
	// the bytes are the engine's post-processing, not the files'.
	// ProtocolVersion (0) and DeviceCapability ("") are filled in by the
	// daemon.
	Config   cacheconfig.Config
	Tensors  []TensorSpec
	Metadata map[string]string
	// Files is the content of the files the tensors were read from
	// (OpenCheckpointPublication sets it; LoadOrPublish, when empty, sets
	// that of the files Config.Model names): clients prove their files
	// against it, also for weights the engine transformed from them.
	// Without it a client can prove nothing: only a daemon that allows
	// "headers" answers attaches to it.
	Files []cacheconfig.FileContent
}

// PublishPlan is the daemon's answer to the table: writable handles and
// each entry's place (Tensors, in table order).
type PublishPlan struct {
	DeviceUUID string
	Generation uint64
	Handles    []Handle
	Tensors    []Tensor
}

// FillFunc copies every entry's bytes to its place in plan and returns
// either nil or one SHA-256 per table entry (in table order) over the bytes
// it wrote. Digests are required by a daemon run with --verify-publish.
// Returning an error aborts the publish (the daemon frees everything).
type FillFunc func(ctx context.Context, plan *PublishPlan) (sha256 [][]byte, err error)

// PublishResult is the daemon's confirmation: it serves the weights.
type PublishResult struct {
	Generation   uint64
	ConfigDigest string
	Bytes        uint64
	Tensors      int
	// Verified is true when the daemon checked every digest.
	Verified bool
}

// ErrPublishInProgress is matched by a *PublishConflictError whose
// reason is that another client is publishing.
var ErrPublishInProgress = errors.New("publish in progress")

// ErrHoldsWeights is matched by a *PublishConflictError whose reason is
// that the daemon already serves weights (evict first, or attach).
var ErrHoldsWeights = errors.New("daemon already holds weights")

// ErrBusy is matched by a *PublishConflictError whose reason is that the
// daemon is draining or stopping (a Publish, an Evict, or an Attach, which
// then gets UNAVAILABLE): it is empty, serving again, or gone once its
// leases are.
var ErrBusy = errors.New("daemon is draining or stopping")

// PublishConflictError: the daemon's state refused a Publish or an Evict.
type PublishConflictError struct {
	Socket string
	// Reason is the wire reason; State the daemon's state.
	Reason       daemonv1.PublishConflict_Reason
	State        daemonv1.DaemonState
	PublisherPID int32
	ConfigDigest string
	// Message is the daemon's own explanation.
	Message string
	// rpcErr is the daemon's status error (status.Code and errors.As see
	// it through Unwrap).
	rpcErr error
}

// Unwrap returns the daemon's status error.
func (e *PublishConflictError) Unwrap() error { return e.rpcErr }

func (e *PublishConflictError) Error() string {
	return fmt.Sprintf("daemon at %s: %s", e.Socket, e.Message)
}

// Is matches ErrPublishInProgress, ErrHoldsWeights and ErrBusy by reason.
func (e *PublishConflictError) Is(target error) bool {
	switch target {
	case ErrPublishInProgress:
		return e.Reason == daemonv1.PublishConflict_REASON_IN_PROGRESS
	case ErrHoldsWeights:
		return e.Reason == daemonv1.PublishConflict_REASON_HOLDS_WEIGHTS
	case ErrBusy:
		return e.Reason == daemonv1.PublishConflict_REASON_BUSY
	}
	return false
}

// Publish fills the daemon with pub's tensors: it sends the config and the
// table, gets the plan, calls fill to copy the bytes in and commits. ctx
// bounds the whole publish; cancelling it (or the process dying) before the
// commit leaves the daemon empty. Errors: *PublishConflictError (another
// publisher: ErrPublishInProgress — load on your own; weights already
// there: ErrHoldsWeights), fill's error, or the daemon's status
// (INVALID_ARGUMENT for a bad table or config, DATA_LOSS for a digest that
// differs, PERMISSION_DENIED for a uid that may not publish, UNIMPLEMENTED
// from a daemon without publish mode).
func (c *Client) Publish(ctx context.Context, pub Publication, fill FillFunc) (*PublishResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Publish(ctx)
	if err != nil {
		return nil, c.publishError(err)
	}
	for _, req := range publishRequests(pub, c.clientName) {
		if err := stream.Send(req); err != nil {
			return nil, c.publishError(sendError(stream, err))
		}
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, c.publishError(err)
	}
	pp := resp.GetPlan()
	if pp == nil {
		return nil, fmt.Errorf("publish to %s: the daemon's answer to the table is not a plan: %w", c.socket, ErrBadManifest)
	}
	plan, err := planFromProto(pp)
	if err != nil {
		return nil, fmt.Errorf("publish to %s: plan: %w", c.socket, err)
	}
	if len(plan.Tensors) != len(pub.Tensors) {
		return nil, fmt.Errorf("publish to %s: plan has %d places for %d tensors: %w", c.socket, len(plan.Tensors), len(pub.Tensors), ErrBadManifest)
	}
	if descriptorHandles(plan.Handles) > 0 {
		files, err := c.fetchDescriptors(ctx, fdchannel.OpPublish, pp.GetPublishId(), pp.GetFdToken(), plan.Handles, nil)
		if err != nil {
			return nil, fmt.Errorf("publish to %s: %w", c.socket, err)
		}
		defer closeHandleFiles(files)
	}
	sums, err := fill(ctx, plan)
	if err != nil {
		return nil, fmt.Errorf("publish to %s: fill: %w", c.socket, err)
	}
	if err := stream.Send(&daemonv1.PublishRequest{Msg: &daemonv1.PublishRequest_Commit{
		Commit: &daemonv1.PublishCommit{Sha256: sums}}}); err != nil {
		return nil, c.publishError(sendError(stream, err))
	}
	resp, err = stream.Recv()
	if err != nil {
		return nil, c.publishError(err)
	}
	done := resp.GetDone()
	if done == nil {
		return nil, fmt.Errorf("publish to %s: the daemon's answer to the commit is not done", c.socket)
	}
	_ = stream.CloseSend()
	return doneFromProto(done), nil
}

// publishRequests is the begin message followed by as many tensors
// messages as the table needs to keep each under maxTableChunkBytes.
func publishRequests(pub Publication, clientName string) []*daemonv1.PublishRequest {
	var chunks [][]*daemonv1.TensorSpec
	var cur []*daemonv1.TensorSpec
	size := 0
	for _, t := range pub.Tensors {
		spec := t.toProto()
		n := proto.Size(spec) + 8
		if size+n > maxTableChunkBytes && len(cur) > 0 {
			chunks = append(chunks, cur)
			cur, size = nil, 0
		}
		cur = append(cur, spec)
		size += n
	}
	chunks = append(chunks, cur)
	reqs := []*daemonv1.PublishRequest{{Msg: &daemonv1.PublishRequest_Begin{Begin: &daemonv1.PublishBegin{
		Config: pub.Config.ToProto(), ClientName: clientName, Metadata: pub.Metadata,
		TensorCount: uint32(len(pub.Tensors)), Tensors: chunks[0], Files: cacheconfig.FilesToProto(pub.Files)}}}}
	for _, ch := range chunks[1:] {
		reqs = append(reqs, &daemonv1.PublishRequest{Msg: &daemonv1.PublishRequest_Tensors{
			Tensors: &daemonv1.PublishTensors{Tensors: ch}}})
	}
	return reqs
}

// sendError is why a Send failed: the daemon ended the stream, and the
// status it ended it with is the next Recv's error.
func sendError(stream daemonv1.Daemon_PublishClient, err error) error {
	if _, rerr := stream.Recv(); rerr != nil {
		return rerr
	}
	return err
}

// publishError converts a Publish or Evict failure: a PublishConflict
// detail becomes a *PublishConflictError.
func (c *Client) publishError(err error) error {
	if st, ok := status.FromError(err); ok && (st.Code() == codes.Aborted || st.Code() == codes.FailedPrecondition) {
		for _, d := range st.Details() {
			if pc, ok := d.(*daemonv1.PublishConflict); ok {
				ce := conflictFromProto(c.socket, pc, st.Message())
				ce.rpcErr = err
				return ce
			}
		}
	}
	return fmt.Errorf("publish to %s: %w", c.socket, err)
}
