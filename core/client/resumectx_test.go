package client

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// TestOpenWaitingForADaemonEndsWithItsContext: open with
// grpc.WaitForReady — how a lease resumes after a handover (Lease.resume)
// — on a socket nobody listens on returns once its context ends, with the
// context's error. It once created the stream under a context of its own
// and waited for a daemon forever, so a lease whose successor never came
// up hung, and Lease.Close with it.
func TestOpenWaitingForADaemonEndsWithItsContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := &Client{conn: conn, rpc: daemonv1.NewDaemonClient(conn), socket: sock}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		o, err := c.open(ctx, cacheconfig.Default(), nil, false, grpc.WaitForReady(true))
		if o != nil {
			o.cancel()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("open = %v, want the context's deadline", err)
		}
	case <-time.After(time.Minute): // a hang, not a timing: the context ends after 200 ms
		t.Fatal("open still waits for a daemon a minute after its context ended")
	}
}
