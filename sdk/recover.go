package sdk

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ExitFatal is the exit status of a plugin that ends after a *FatalError.
const ExitFatal = 70

// fatalExitDelay lets the reply to the failed call reach the host before
// the process exits.
const fatalExitDelay = 200 * time.Millisecond

// FatalError marks a failure the plugin process cannot survive, typically
// from the driver layer (a poisoned device context, a corrupted driver
// state). Panic with one, directly or through Fatal, anywhere below a
// Backend method: Serve answers the call with the error (wrapping
// ErrUnavailable on the host side), logs it once with the stack, and exits
// the process with ExitFatal shortly after, without a crash dump. Any
// other panic in a Backend method is recovered and answered as an error
// (gRPC INTERNAL with the panic message; the stack logged once), and the
// plugin keeps serving.
type FatalError struct {
	Err error
}

func (e *FatalError) Error() string { return "fatal backend error: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FatalError) Unwrap() error { return e.Err }

// Fatal panics with a *FatalError wrapping err (see FatalError).
func Fatal(err error) {
	if err == nil {
		err = errors.New("sdk.Fatal(nil)")
	}
	panic(&FatalError{Err: err})
}

// recoverer is the gRPC interceptor pair that turns panics in handlers
// into errors.
type recoverer struct {
	logger   hclog.Logger
	exit     func(int)
	exitOnce sync.Once
}

func (r *recoverer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, r.recovered(info.FullMethod, v)
		}
	}()
	return handler(ctx, req)
}

func (r *recoverer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = r.recovered(info.FullMethod, v)
		}
	}()
	return handler(srv, ss)
}

// recovered logs a recovered panic once, with its stack, and returns the
// status the caller gets. A *FatalError schedules the exit.
func (r *recoverer) recovered(method string, v any) error {
	stack := string(debug.Stack())
	var fe *FatalError
	if err, ok := v.(error); ok && errors.As(err, &fe) {
		r.logger.Error("fatal error in a backend call; the plugin exits", "method", method, "error", fe.Err.Error(), "stack", stack)
		r.exitOnce.Do(func() { time.AfterFunc(fatalExitDelay, func() { r.exit(ExitFatal) }) })
		return toStatus(fmt.Errorf("%s: %w; the backend plugin exits (status %d)", method, fmt.Errorf("%v: %w", fe, ErrUnavailable), ExitFatal))
	}
	r.logger.Error("panic in a backend call, recovered; the plugin keeps serving", "method", method, "panic", fmt.Sprint(v), "stack", stack)
	return status.Errorf(codes.Internal, "backend panic in %s: %v (the stack is in the plugin's log)", method, v)
}
