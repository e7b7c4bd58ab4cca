package backendrpc

import (
	"context"
	"errors"
	"fmt"
	"github.com/wcache/wcache/sdk"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
)

// This file carries typed errors across the plugin boundary. The server
// side turns an error wrapping a sentinel into a gRPC status with a
// matching code and a backendv1.ErrorDetail; the client side turns the
// status back into an error that wraps the same sentinel and keeps the
// message, so errors.Is works in the host exactly as in the plugin.

// wireKind is how a sentinel error travels across the plugin boundary:
// the gRPC code and the backendv1.ErrorDetail reason that name it.
type wireKind struct {
	sentinel error
	code     codes.Code
	reason   backendv1.ErrorDetail_Reason
}

// wireKinds lists every sentinel's wire kind, in the order errorKind
// tries them (the first one an error wraps names it).
func wireKinds() [6]wireKind {
	return [...]wireKind{
		{sdk.ErrNoSuchDevice, codes.NotFound, backendv1.ErrorDetail_REASON_NO_SUCH_DEVICE},
		{sdk.ErrNoSuchAllocation, codes.NotFound, backendv1.ErrorDetail_REASON_NO_SUCH_ALLOCATION},
		{sdk.ErrOutOfMemory, codes.ResourceExhausted, backendv1.ErrorDetail_REASON_OUT_OF_MEMORY},
		{sdk.ErrUnsupported, codes.Unimplemented, backendv1.ErrorDetail_REASON_UNSUPPORTED},
		{sdk.ErrUnavailable, codes.Unavailable, backendv1.ErrorDetail_REASON_UNAVAILABLE},
		{sdk.ErrInvalidArgument, codes.InvalidArgument, backendv1.ErrorDetail_REASON_INVALID_ARGUMENT},
	}
}

// errorKind returns the gRPC code and the reason that name the sentinel err
// wraps on the wire. An error that wraps none is codes.Unknown.
func errorKind(err error) (codes.Code, backendv1.ErrorDetail_Reason) {
	for _, k := range wireKinds() {
		if errors.Is(err, k.sentinel) {
			return k.code, k.reason
		}
	}
	return codes.Unknown, backendv1.ErrorDetail_REASON_UNSPECIFIED
}

// sentinelForReason is the inverse of errorKind: the sentinel reason
// names, nil for none.
func sentinelForReason(r backendv1.ErrorDetail_Reason) error {
	for _, k := range wireKinds() {
		if k.reason == r {
			return k.sentinel
		}
	}
	return nil
}

// ToStatus converts an error returned by a sdk.Backend into the gRPC status
// error the server adapter sends: the code and a backendv1.ErrorDetail
// naming the sentinel it wraps, so that the client adapter rebuilds an
// error wrapping the same sentinel. Context errors keep their own codes
// (Canceled, DeadlineExceeded) and carry no detail; nil is nil. The plugin
// runtime (sdk/plugin) uses it for the answers to recovered panics.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if _, reason := errorKind(err); reason == backendv1.ErrorDetail_REASON_UNSPECIFIED {
			return status.Error(status.FromContextError(err).Code(), err.Error())
		}
	}
	code, reason := errorKind(err)
	st := status.New(code, err.Error())
	withDetail, derr := st.WithDetails(protoadapt.MessageV1Of(&backendv1.ErrorDetail{
		Reason:  reason,
		Message: err.Error(),
	}))
	if derr != nil {
		// Only a marshalling failure gets here; the code still carries the kind.
		return st.Err()
	}
	return withDetail.Err()
}

// fromStatus converts an error from a gRPC call made for op back into a
// domain error: a *sdk.RemoteError wrapping the sentinel named by the
// ErrorDetail (or implied by the code), a *sdk.TransportError when the plugin
// could not be reached, or ctx's own error when the caller cancelled.
func fromStatus(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &sdk.TransportError{Op: op, Err: err}
	}
	for _, d := range st.Details() {
		if detail, ok := d.(*backendv1.ErrorDetail); ok {
			msg := detail.GetMessage()
			if msg == "" {
				msg = st.Message()
			}
			return &sdk.RemoteError{Code: st.Code(), Kind: sentinelForReason(detail.GetReason()), Message: msg}
		}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%s: %w", op, cerr)
		}
		if st.Code() == codes.DeadlineExceeded {
			return &sdk.RemoteError{Code: st.Code(), Kind: context.DeadlineExceeded, Message: st.Message()}
		}
		// Canceled without a cancelled caller: the connection is closing.
		return &sdk.TransportError{Op: op, Err: err}
	case codes.Unavailable:
		return &sdk.TransportError{Op: op, Err: err}
	case codes.Unimplemented:
		// A plugin built against an older API that lacks the method.
		return &sdk.RemoteError{Code: st.Code(), Kind: sdk.ErrUnsupported, Message: st.Message()}
	default:
		return &sdk.RemoteError{Code: st.Code(), Message: st.Message()}
	}
}
