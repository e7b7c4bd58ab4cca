// Package grpcpipe connects the gRPC adapters (internal/backendrpc) over an in-memory
// connection (bufconn), for tests of what crosses the plugin boundary
// without a plugin process. It is for tests only (it imports testing).
package grpcpipe

import (
	"context"
	"github.com/wcache/wcache/internal/backendrpc"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
	"github.com/wcache/wcache/sdk"
)

// Connect serves impl through the server adapter (backendrpc.NewServer) on
// an in-memory listener and returns the client adapter
// (backendrpc.NewClient) over a connection to it, which accepts replies of up
// to 64 MiB, and the server (its Stop ends every call). Both are closed
// at the test's cleanup; a failed dial ends the test.
func Connect(t testing.TB, impl sdk.Backend) (sdk.Backend, *grpc.Server) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	backendv1.RegisterBackendServer(srv, backendrpc.NewServer(impl))
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return backendrpc.NewClient(conn), srv
}
