package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testplugin"
	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/poll"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/sdk/names"
)

// fixture is one test's world: a short private directory, a layout inside
// it, a generated checkpoint and a mock backend of two devices.
type fixture struct {
	t      testing.TB
	dir    string
	layout paths.Layout
	model  *safetensorstest.Result
	shm    string
	uuids  []string
	// memfd makes plugin's backends export memfd descriptor handles.
	memfd bool
	// fillStats makes plugin's backends return the fill's counters and
	// content-digest leaves (mock.Wrap alone drops them).
	fillStats bool
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	w := testworld.New(t, testworld.Options{
		UUIDs: []string{"GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"}})
	return &fixture{t: t, dir: w.Dir, layout: w.Layout, model: w.Model, shm: w.Shm, uuids: w.UUIDs}
}

// plugin returns a plugin over an sdk/mock.Memory of the fixture's
// devices (1 GiB each, files in f.shm); inject, when set, replaces some of
// its calls (to make them fail).
func (f *fixture) plugin(inject func(*mock.Backend)) *testplugin.Plugin {
	f.t.Helper()
	mem, err := mock.NewMemory(mock.MemoryOptions{DeviceUUIDs: f.uuids, Memory: 1 << 30, Dir: f.shm, Memfd: f.memfd})
	if err != nil {
		f.t.Fatal(err)
	}
	b := mock.Wrap(mem)
	if f.fillStats {
		b.LoadFunc, b.LoadStatsFunc = nil, mem.LoadWithStats
	}
	if inject != nil {
		inject(b)
	}
	return testplugin.New(b, mem)
}

func (f *fixture) options(gpu int) Options {
	return Options{GPU: gpu, Model: f.model.Dir, Config: cacheconfig.Default(), Layout: f.layout,
		DrainTimeout: 2 * time.Second}
}

// running is a daemon whose Run goroutine the test watches (Cancel, Done,
// Err, Wait).
type running struct {
	*testworld.Running
	d *Daemon
	p *testplugin.Plugin
}

// start starts a daemon on gpu with options edited by edit and runs it.
func (f *fixture) start(gpu int, edit func(*Options)) *running {
	f.t.Helper()
	return f.startWith(gpu, f.plugin(nil), edit)
}

// startWith starts a daemon on gpu over plugin p with options edited by
// edit and runs it.
func (f *fixture) startWith(gpu int, p *testplugin.Plugin, edit func(*Options)) *running {
	f.t.Helper()
	o := f.options(gpu)
	if edit != nil {
		edit(&o)
	}
	return f.run(p, o)
}

// run starts a daemon over p with o and runs it until the test ends.
func (f *fixture) run(p *testplugin.Plugin, o Options) *running {
	f.t.Helper()
	d, err := Start(context.Background(), p, o)
	if err != nil {
		f.t.Fatalf("start: %v", err)
	}
	return &running{Running: testworld.Run(f.t, d), d: d, p: p}
}

// attach attaches to the daemon of r with its own config.
func (r *running) attach(t *testing.T, edit func(*cacheconfig.Config)) (*client.Attachment, error) {
	t.Helper()
	return testworld.Attach(t, r.d.Info().Paths.Socket, r.d.Info().Config, edit)
}

// mustAttachHashing is mustAttach under content policy "hash": for a
// generation filled from a peer whose records carry the received bytes'
// digests, not the local files' identity (netfill.go, proveContent).
func (r *running) mustAttachHashing(t *testing.T) *client.Attachment {
	t.Helper()
	return r.mustAttachProving(t, cacheconfig.PolicyHash)
}

// mustAttach attaches to r with its own config under the default content
// policy (identity); a failure ends the test, the lease closes when it ends.
func (r *running) mustAttach(t *testing.T) *client.Attachment {
	t.Helper()
	return r.mustAttachProving(t, cacheconfig.PolicyIdentity)
}

func (r *running) mustAttachProving(t *testing.T, policy cacheconfig.Policy) *client.Attachment {
	t.Helper()
	a, err := testworld.AttachProving(t, r.d.Info().Paths.Socket, r.d.Info().Config, policy)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() { a.Lease.Close() })
	return a
}

// dial connects a client to r.
func (r *running) dial(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.BySocket(r.d.Info().Paths.Socket),
		client.Options{Content: client.ContentOptions{NoCache: true}}) // never the user's digest cache
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawRPC connects a bare gRPC client to r's socket, for requests that
// core/client never sends; the connection closes when the test ends.
func (r *running) rawRPC(t *testing.T) daemonv1.DaemonClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+r.d.Info().Paths.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return daemonv1.NewDaemonClient(conn)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, 5*time.Second, what, cond)
}

func assertGone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", p, err)
		}
	}
}

func mustTemplate(t *testing.T, text string) paths.Template {
	t.Helper()
	tmpl, err := paths.ParseTemplate("test", text)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// generate writes another checkpoint into the fixture's folder, under
// name; a failure ends the test.
func (f *fixture) generate(name string, o safetensorstest.GenOptions) *safetensorstest.Result {
	f.t.Helper()
	m, err := safetensorstest.GenerateCheckpoint(filepath.Join(f.dir, name), o)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// safetensorsGenerate writes a pre-sharded checkpoint of tp ranks.
func safetensorsGenerate(dir string, tp int) (*safetensorstest.Result, error) {
	return safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{TPSize: tp, Shards: 2})
}

// corruptingPeerCopy is a PeerCopyFunc that copies through mem and then
// overwrites two bytes of the copy at the offset at gives for the
// request: a copy that succeeds with other bytes.
func corruptingPeerCopy(mem *mock.Memory, at func(sdk.PeerCopyRequest) int64) func(context.Context, sdk.PeerCopyRequest, sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
	return func(ctx context.Context, req sdk.PeerCopyRequest, p sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
		res, err := mem.PeerCopy(ctx, req, p)
		if err != nil {
			return res, err
		}
		if mem.HandleKind() == names.KindMemfd {
			// A memfd is sealed once exported: the two bytes are loaded
			// into the copy from a file instead.
			junk := filepath.Join(os.TempDir(), fmt.Sprintf("wcache-corrupt-%d", os.Getpid()))
			if err := os.WriteFile(junk, []byte{0x5a, 0xa5}, 0o600); err != nil {
				return res, err
			}
			defer os.Remove(junk)
			return res, mem.Load(ctx, res.ID, []sdk.Extent{{Path: junk, Length: 2, DestOffset: uint64(at(req))}}, nil)
		}
		h, err := mem.Export(ctx, res.ID)
		if err != nil {
			return res, err
		}
		defer closeHandleFiles([]sdk.Handle{h})
		fh, err := os.OpenFile(string(h.Data), os.O_WRONLY, 0)
		if err != nil {
			return res, err
		}
		defer fh.Close()
		_, err = fh.WriteAt([]byte{0x5a, 0xa5}, at(req))
		return res, err
	}
}
