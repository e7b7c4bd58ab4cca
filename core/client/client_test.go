package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/paths/pathstest"
)

// layoutIn is a layout of every device's socket and ready file in dir,
// from templates (no environment).
func layoutIn(t *testing.T, dir string) paths.Layout {
	t.Helper()
	layout, err := paths.NewLayout(paths.Options{
		SocketTemplate: dir + "/{device_uuid}.sock", ReadyTemplate: dir + "/{device_uuid}.ready",
		Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	return layout
}

// fakeDaemon is a daemon.v1 server whose answers the test sets.
type fakeDaemon struct {
	daemonv1.UnimplementedDaemonServer
	attach func(*daemonv1.AttachRequest, daemonv1.Daemon_AttachServer) error
	// status, when set, is the Status answer.
	status func() *daemonv1.StatusResponse
}

func (f *fakeDaemon) Attach(req *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
	return f.attach(req, s)
}

func (f *fakeDaemon) Status(context.Context, *daemonv1.StatusRequest) (*daemonv1.StatusResponse, error) {
	if f.status != nil {
		return f.status(), nil
	}
	return &daemonv1.StatusResponse{Pid: 7, DeviceUuid: "GPU-x", State: "serving",
		Leases: []*daemonv1.Lease{{Id: 3, Pid: 9, Uid: 1, ClientName: "c", SinceUnixMs: 1000}}}, nil
}

func (f *fakeDaemon) Stop(_ context.Context, r *daemonv1.StopRequest) (*daemonv1.StopResponse, error) {
	if !r.GetForce() {
		return nil, status.Error(codes.FailedPrecondition, "drain timed out")
	}
	return &daemonv1.StopResponse{LeasesAtStop: 2}, nil
}

// serve runs f on a socket in dir and returns the socket path.
func serve(t *testing.T, dir string, f *fakeDaemon) string {
	t.Helper()
	return serveAt(t, filepath.Join(dir, "d.sock"), f)
}

// serveWith runs f on a socket in dir with server options.
func serveWith(t *testing.T, dir string, f *fakeDaemon, opts ...grpc.ServerOption) string {
	t.Helper()
	return serveAt(t, filepath.Join(dir, "d.sock"), f, opts...)
}

// dialFake runs f on a socket in a new folder, with server options, and
// dials it; the client is closed with the test.
func dialFake(t *testing.T, f *fakeDaemon, opts ...grpc.ServerOption) *Client {
	t.Helper()
	c, err := Dial(context.Background(), BySocket(serveWith(t, pathstest.ShortDir(t), f, opts...)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// serveAt runs f on a socket at path and returns path.
func serveAt(t *testing.T, path string, f *fakeDaemon, opts ...grpc.ServerOption) string {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	daemonv1.RegisterDaemonServer(srv, f)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return path
}

func manifestEvent(tensors ...*daemonv1.Tensor) *daemonv1.AttachEvent {
	return &daemonv1.AttachEvent{Event: &daemonv1.AttachEvent_Manifest{Manifest: &daemonv1.Manifest{
		DeviceUuid: "GPU-abc", Backend: "mock", LeaseId: 5,
		Config:  &configv1.CacheConfig{Model: "/m", TpSize: 1},
		Handles: []*daemonv1.Handle{{Kind: "posix-shm", Data: []byte("/dev/shm/x"), Size: 100}},
		Tensors: tensors,
		// These fakes are about leases, not content: they allow an
		// attach that names no files (proof_test.go covers the rest).
		ContentPolicies: []string{"identity", "hash", "headers"},
	}}}
}

func TestCheckSocketRules(t *testing.T) {
	dir := pathstest.ShortDir(t)
	live := serve(t, dir, &fakeDaemon{})
	regular, link := pathstest.NotSockets(t, dir, live)
	if err := checkSocket(live, "", nil); err != nil {
		t.Errorf("a socket of ours: %v", err)
	}
	err := checkSocket(filepath.Join(dir, "absent"), "GPU-1", nil)
	var nd *NoDaemonError
	if !errors.Is(err, ErrNoDaemon) || !errors.As(err, &nd) || nd.DeviceUUID != "GPU-1" {
		t.Errorf("absent: %v, want *NoDaemonError", err)
	}
	for path, want := range map[string]string{regular: "regular file", link: "symlink", dir: "directory"} {
		err := checkSocket(path, "", nil)
		if !errors.Is(err, ErrUnsafeSocket) || !strings.Contains(err.Error(), want) || errors.Is(err, ErrNoDaemon) {
			t.Errorf("%s: %v, want ErrUnsafeSocket saying %q", path, err, want)
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(live, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		err := checkSocket(live, "", nil)
		if !errors.Is(err, ErrUnsafeSocket) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("foreign owner: %v", err)
		}
		if err := checkSocket(live, "", []uint32{65534}); err != nil {
			t.Errorf("allowed owner: %v", err)
		}
	}
}

func TestDialRefusedIsDaemonDead(t *testing.T) {
	dir := pathstest.ShortDir(t)
	path := filepath.Join(dir, "dead.sock")
	pathstest.DeadSocket(t, path)
	_, err := Dial(context.Background(), BySocket(path), Options{})
	var dd *DaemonDeadError
	if !errors.Is(err, ErrDaemonDead) || !errors.As(err, &dd) || errors.Is(err, ErrNoDaemon) {
		t.Fatalf("err = %v, want *DaemonDeadError", err)
	}
}

func TestDiscoveryByUUIDAndOrdinal(t *testing.T) {
	dir := pathstest.ShortDir(t)
	layout := layoutIn(t, dir)
	_, err := Dial(context.Background(), ByDeviceUUID(layout, "GPU-aaaa"), Options{})
	var nd *NoDaemonError
	if !errors.As(err, &nd) || nd.Socket != dir+"/GPU-aaaa.sock" {
		t.Fatalf("by uuid: %v", err)
	}
	_, err = Dial(context.Background(), ByDeviceUUID(layout, "../etc"), Options{})
	if !errors.Is(err, paths.ErrInvalidUUID) {
		t.Fatalf("hostile uuid: %v", err)
	}
	_, err = Dial(context.Background(), ByOrdinal(layout, resolverFunc(func(n int) (string, error) {
		return "GPU-ord" + string(rune('0'+n)), nil
	}), 3), Options{})
	if !errors.As(err, &nd) || nd.DeviceUUID != "GPU-ord3" {
		t.Fatalf("by ordinal: %v", err)
	}
	boom := errors.New("no such device")
	_, err = Dial(context.Background(), ByOrdinal(layout, resolverFunc(func(int) (string, error) { return "", boom }), 0), Options{})
	if !errors.Is(err, boom) || errors.Is(err, ErrNoDaemon) {
		t.Fatalf("resolver failure: %v", err)
	}
}

type resolverFunc func(int) (string, error)

func (f resolverFunc) DeviceUUID(_ context.Context, n int) (string, error) { return f(n) }

func TestAttachDecodesMismatch(t *testing.T) {
	dir := pathstest.ShortDir(t)
	path := serve(t, dir, &fakeDaemon{attach: func(*daemonv1.AttachRequest, daemonv1.Daemon_AttachServer) error {
		st, _ := status.New(codes.FailedPrecondition, "mismatch").WithDetails(&daemonv1.ConfigMismatch{Diffs: []*daemonv1.FieldDiff{
			{Field: "tp_rank", DaemonValue: "0", ClientValue: "1"}, {Field: "extra.x", ClientValue: "2", DaemonAbsent: true}}, Omitted: 5})
		return st.Err()
	}})
	_, err := Attach(context.Background(), BySocket(path), cacheconfig.Default(), Options{})
	me, ok := IsMismatch(err)
	if !ok || len(me.Diffs) != 2 || me.Diffs[0] != (cacheconfig.FieldDiff{Field: "tp_rank", Daemon: "0", Client: "1"}) ||
		me.Diffs[1] != (cacheconfig.FieldDiff{Field: "extra.x", Client: "2", DaemonAbsent: true}) || me.Omitted != 5 {
		t.Fatalf("err = %v, want a mismatch with both diffs", err)
	}
	if !errors.Is(err, cacheconfig.ErrMismatch) {
		t.Error("mismatch does not match cacheconfig.ErrMismatch")
	}
}

func TestAttachLeaseNoticesAndDone(t *testing.T) {
	dir := pathstest.ShortDir(t)
	release := make(chan struct{})
	path := serve(t, dir, &fakeDaemon{attach: func(req *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
		if req.GetClientName() != "tester" {
			return status.Error(codes.InvalidArgument, "client name lost")
		}
		if err := s.Send(manifestEvent(&daemonv1.Tensor{Name: "w", Dtype: "F32", Shape: []uint64{2}, Offset: 8, Length: 8})); err != nil {
			return err
		}
		if err := s.Send(&daemonv1.AttachEvent{Event: &daemonv1.AttachEvent_Notice{Notice: &daemonv1.Notice{
			Kind: daemonv1.Notice_KIND_DRAINING, Message: "going", DeadlineUnixMs: 123000}}}); err != nil {
			return err
		}
		<-release
		return status.Error(codes.Unavailable, "backend plugin exited: boom")
	}})
	a, err := Attach(context.Background(), BySocket(path), cacheconfig.Default(), Options{ClientName: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	m := a.Manifest
	if m.DeviceUUID != "GPU-abc" || m.LeaseID != 5 || a.Lease.ID() != 5 || len(m.Tensors) != 1 ||
		fmt.Sprint(m.Tensors[0]) != fmt.Sprint(Tensor{Name: "w", DType: "F32", Shape: []uint64{2}, Offset: 8, Length: 8}) ||
		m.Config.Model != "/m" || m.Bytes() != 8 {
		t.Fatalf("manifest = %+v", m)
	}
	n := <-a.Lease.Notices()
	if n.Kind != NoticeDraining || n.Message != "going" || !n.Deadline.Equal(time.UnixMilli(123000)) {
		t.Errorf("notice = %+v", n)
	}
	close(release)
	select {
	case <-a.Lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not done after the daemon ended it")
	}
	if status.Code(a.Lease.Err()) != codes.Unavailable || !strings.Contains(a.Lease.Err().Error(), "plugin exited") {
		t.Errorf("lease err = %v", a.Lease.Err())
	}
	if err := a.Lease.Close(); err != nil {
		t.Errorf("close after end: %v", err)
	}
}

func TestLeaseCloseEndsStream(t *testing.T) {
	dir := pathstest.ShortDir(t)
	ended := make(chan struct{})
	path := serve(t, dir, &fakeDaemon{attach: func(_ *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
		if err := s.Send(manifestEvent()); err != nil {
			return err
		}
		<-s.Context().Done()
		close(ended)
		return nil
	}})
	a, err := Attach(context.Background(), BySocket(path), cacheconfig.Default(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lease.Close(); err != nil {
		t.Fatal(err)
	}
	if a.Lease.Err() != nil {
		t.Errorf("err after Close = %v, want nil", a.Lease.Err())
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the daemon did not see the lease end")
	}
}

func TestAttachRejectsBadManifest(t *testing.T) {
	for name, tn := range map[string]*daemonv1.Tensor{
		"past the handle": {Name: "w", Offset: 96, Length: 8},
		"unknown handle":  {Name: "w", HandleIndex: 1},
		"overflow":        {Name: "w", Offset: 50, Length: ^uint64(0)},
	} {
		t.Run(name, func(t *testing.T) {
			path := serve(t, pathstest.ShortDir(t), &fakeDaemon{attach: func(_ *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
				if err := s.Send(manifestEvent(tn)); err != nil {
					return err
				}
				<-s.Context().Done()
				return nil
			}})
			_, err := Attach(context.Background(), BySocket(path), cacheconfig.Default(), Options{})
			if !errors.Is(err, ErrBadManifest) {
				t.Fatalf("err = %v, want ErrBadManifest", err)
			}
		})
	}
}

func TestStatusAndStop(t *testing.T) {
	path := serve(t, pathstest.ShortDir(t), &fakeDaemon{})
	c, err := Dial(context.Background(), BySocket(path), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != 7 || st.DeviceUUID != "GPU-x" || len(st.Leases) != 1 || st.Leases[0].PID != 9 ||
		!st.Leases[0].Since.Equal(time.UnixMilli(1000)) {
		t.Errorf("status = %+v", st)
	}
	if _, err := c.Stop(context.Background(), false, time.Second); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("drain stop: %v", err)
	}
	if n, err := c.Stop(context.Background(), true, 0); err != nil || n != 2 {
		t.Errorf("force stop = %d, %v", n, err)
	}
}

// TestDialRefusesSilentPeer: a socket that accepts but never speaks gRPC
// fails at Dial, within DialTimeout, and the connection is closed.
func TestDialRefusesSilentPeer(t *testing.T) {
	dir := pathstest.ShortDir(t)
	path := filepath.Join(dir, "raw.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := Dial(context.Background(), BySocket(path), Options{DialTimeout: 300 * time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial to a silent peer succeeded")
	}
	if !strings.Contains(err.Error(), "no gRPC handshake") {
		t.Errorf("Dial = %v, want the handshake error of the dial timeout", err)
	}
	server := <-accepted
	defer server.Close()
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err = server.Read(buf); err != nil {
			break
		}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the daemon side still sees an open connection after the failed Dial")
	}
}

// TestIdleClientOutlivesHandshakeTimeout: a client dialed now and used
// later works (the handshake happens in Dial, not at the first call).
func TestIdleClientOutlivesHandshakeTimeout(t *testing.T) {
	path := serveWith(t, pathstest.ShortDir(t), &fakeDaemon{}, grpc.ConnectionTimeout(200*time.Millisecond))
	c, err := Dial(context.Background(), BySocket(path), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(500 * time.Millisecond)
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("Status after an idle wait: %v", err)
	}
}

// TestAttachRefusesManifestOfAnotherDevice: the daemon listening where
// GPU-want's daemon should be serves GPU-abc (a socket planted or moved by
// hand, a template shared by mistake). Found by UUID or by ordinal, it is
// refused with a *DeviceMismatchError and its lease is released; found by
// an explicit socket, or serving the right UUID, it is accepted.
func TestAttachRefusesManifestOfAnotherDevice(t *testing.T) {
	dir := pathstest.ShortDir(t)
	layout := layoutIn(t, dir)
	ended := make(chan struct{}, 8)
	fake := &fakeDaemon{attach: func(_ *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
		if err := s.Send(manifestEvent()); err != nil { // device GPU-abc
			return err
		}
		<-s.Context().Done()
		ended <- struct{}{}
		return nil
	}}
	wrong := serveAt(t, dir+"/GPU-want.sock", fake)
	serveAt(t, dir+"/GPU-abc.sock", fake)

	for name, target := range map[string]Target{
		"by uuid":    ByDeviceUUID(layout, "GPU-want"),
		"by ordinal": ByOrdinal(layout, resolverFunc(func(int) (string, error) { return "GPU-want", nil }), 1),
	} {
		_, err := Attach(context.Background(), target, cacheconfig.Default(), Options{})
		var dm *DeviceMismatchError
		if !errors.As(err, &dm) || !errors.Is(err, ErrBadManifest) {
			t.Fatalf("%s: err = %v, want a *DeviceMismatchError matching ErrBadManifest", name, err)
		}
		if dm.Want != "GPU-want" || dm.Got != "GPU-abc" || dm.Socket != wrong ||
			!strings.Contains(err.Error(), `"GPU-abc"`) || !strings.Contains(err.Error(), `"GPU-want"`) {
			t.Errorf("%s: error %+v (%q) does not name both devices and the socket", name, dm, err)
		}
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the refused attach kept its lease open", name)
		}
	}

	for name, target := range map[string]Target{
		"explicit socket": BySocket(wrong), // no UUID to check against
		"right uuid":      ByDeviceUUID(layout, "GPU-abc"),
	} {
		a, err := Attach(context.Background(), target, cacheconfig.Default(), Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a.Manifest.DeviceUUID != "GPU-abc" {
			t.Errorf("%s: manifest of %q", name, a.Manifest.DeviceUUID)
		}
		if err := a.Lease.Close(); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
	}
}
