package plugin

import (
	"context"
	"errors"
	"fmt"
	"github.com/wcache/wcache/internal/backendrpc"
	"runtime/debug"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/sdk"
)

// fatalExitDelay lets the reply to the failed call reach the host before
// the process exits.
const fatalExitDelay = 200 * time.Millisecond

// recoverer is the gRPC interceptor pair that turns panics in handlers
// into errors (see sdk.FatalError).
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
// status the caller gets. A *sdk.FatalError schedules the exit with
// sdk.ExitFatal.
func (r *recoverer) recovered(method string, v any) error {
	stack := string(debug.Stack())
	var fe *sdk.FatalError
	if err, ok := v.(error); ok && errors.As(err, &fe) {
		r.logger.Error("fatal error in a backend call; the plugin exits", "method", method, "error", fe.Err.Error(), "stack", stack)
		r.exitOnce.Do(func() { time.AfterFunc(fatalExitDelay, func() { r.exit(sdk.ExitFatal) }) })
		return backendrpc.ToStatus(fmt.Errorf("%s: %w; the backend plugin exits (status %d)", method, fmt.Errorf("%v: %w", fe, sdk.ErrUnavailable), sdk.ExitFatal))
	}
	r.logger.Error("panic in a backend call, recovered; the plugin keeps serving", "method", method, "panic", fmt.Sprint(v), "stack", stack)
	return status.Errorf(codes.Internal, "backend panic in %s: %v (the stack is in the plugin's log)", method, v)
}
