package peerfill

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/core/peer/peertest"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/test/netns"
	"github.com/wcache/wcache/test/testproc"
)

// The daemon cases: real `wcache serve` daemons (mock backend, memfd
// arenas) in the two hosts, daemon A with --peer-listen, daemon B with
// --peers; the test talks to both over their Unix sockets (paths are not
// namespaced).

// peerPort is the port of daemon A's peer endpoint (the namespaces are the
// test's own: nothing else listens there).
const peerPort = "7450"

// modelSpec is the checkpoint the daemons load: a few files, one arena.
var modelSpec = testproc.ModelSpec{Bytes: 24 << 20, Tensors: 30, Files: 3}

// node is one host's wcache world and the daemon it runs.
type node struct {
	h    *netns.Host
	w    *testproc.World
	proc *testproc.Process
}

// newNode makes a world for h: its own runtime folder, mock device and
// digest cache folder (XDG_CACHE_HOME, so no daemon reads the user's).
func newNode(t *testing.T, h *netns.Host) *node {
	t.Helper()
	w, err := testproc.NewWorld(testproc.WorldOptions{Prefix: "pf", Devices: 1, PluginDir: binDir(t), TempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	w.Setenv("XDG_CACHE_HOME=" + filepath.Join(w.Root, "cache"))
	return &node{h: h, w: w}
}

// binDir is the folder of the built wcache and mock plugin.
func binDir(t testing.TB) string {
	dir := os.Getenv(binDirEnv)
	if dir == "" {
		t.Fatalf("%s is not set (TestMain builds the binaries)", binDirEnv)
	}
	return dir
}

// serve starts `wcache serve --model dir args…` in the node's host and
// waits for its ready file; the daemon is killed when t ends.
func (n *node) serve(t *testing.T, dir string, args ...string) {
	t.Helper()
	p, err := n.h.Start(testproc.Options{Path: filepath.Join(binDir(t), "wcache"), Dir: n.w.Root, Env: n.w.Env(),
		Args: testproc.ServeArgs("mock", 0, append([]string{"--model", dir, "--log-level", "debug"}, args...)...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	n.proc = p
	paths, err := n.w.Paths(n.w.UUIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(t.Context(), paths.Ready, startTimeout); err != nil {
		t.Fatal(err)
	}
}

// status is the daemon's Status.
func (n *node) status(t *testing.T) *client.Status {
	t.Helper()
	st, err := n.w.Status(t.Context(), n.w.UUIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// generation is the daemon's one generation (Status).
func generation(t *testing.T, n *node) client.GenerationStatus {
	t.Helper()
	st := n.status(t)
	if len(st.Generations) != 1 {
		t.Fatalf("the daemon holds %d generations, want 1", len(st.Generations))
	}
	return st.Generations[0]
}

// attach runs `wcache attach --verify` against the node's daemon with the
// files under dir: every tensor read back and compared with the files.
// It returns the exit code and the output.
func (n *node) attach(t *testing.T, dir string, extra ...string) (int, string) {
	t.Helper()
	g := testproc.NewGroup(testproc.Options{Path: filepath.Join(binDir(t), "wcache"), Dir: n.w.Root, Env: n.w.Env()})
	res, err := g.Run(startTimeout, testproc.Options{Args: append([]string{"attach", "--backend", "mock", "--gpu-id", "0",
		"--model", dir, "--verify"}, extra...)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Code, res.String()
}

// procIO is the I/O counters of the process at pid (testproc.ReadIO).
func procIO(t *testing.T, pid int) testproc.IO {
	t.Helper()
	io, err := testproc.ReadIO(pid)
	if err != nil {
		t.Fatal(err)
	}
	return io
}

// readChars is what the process read through read-family system calls
// (files, sockets, pipes).
func readChars(t *testing.T, pid int) uint64 { return procIO(t, pid).RChar }

// model generates the checkpoint once per test.
func model(t *testing.T) *testproc.Model {
	t.Helper()
	m, _, err := testproc.GenerateModel(t.TempDir(), modelSpec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fineTune copies m with the same headers and other tensor values (every
// data byte inverted): the same checkpoint digest, so the same weights
// identity, and other content.
func fineTune(t *testing.T, m *testproc.Model) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), filepath.Base(m.Dir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(m.Dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".safetensors") {
			f, err := safetensors.Open(filepath.Join(m.Dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for i := f.DataStart; i < int64(len(b)); i++ {
				b[i] = ^b[i]
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cacheDigests records the content digest of every checkpoint file of m
// in n's digest cache, as an earlier `wcache attach --content hash` would.
func (n *node) cacheDigests(t *testing.T, m *testproc.Model) {
	t.Helper()
	c := &client.DigestCache{Dir: filepath.Join(n.w.Root, "cache", "wcache", "digests"), UID: os.Geteuid()}
	for _, p := range m.Files {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		d, err := filedigest.File(t.Context(), p, filedigest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Store(safetensors.StampOf(st), d); err != nil {
			t.Fatal(err)
		}
	}
}

// certArgs are the certificate flags of creds.
func certArgs(creds *peer.Credentials) []string {
	return []string{"--peer-cert", creds.CertFile, "--peer-key", creds.KeyFile, "--peer-ca", creds.CAFile}
}

// pair is two nodes of a new namespace pair, daemon A serving m's files
// (or dirA) with creds on peerPort.
type daemons struct {
	a, b   *node
	peerAt string
}

func startA(t *testing.T, dirA string, creds *peer.Credentials, extra ...string) *daemons {
	t.Helper()
	pair := netns.New(t)
	d := &daemons{a: newNode(t, pair.A), b: newNode(t, pair.B), peerAt: pair.A.Addr.String() + ":" + peerPort}
	d.a.serve(t, dirA, append(append([]string{"--peer-listen", d.peerAt}, certArgs(creds)...), extra...)...)
	return d
}

// wantFiles asserts that b loaded from its files after a logged fallback,
// and that the bytes it serves are m's.
func wantFiles(t *testing.T, b *node, m *testproc.Model, reason string) {
	t.Helper()
	g := generation(t, b)
	if g.FilledFrom != "files" || !strings.Contains(g.FillFallback, reason) {
		t.Errorf("B's Status: filled_from %q, fill_fallback %q: want files, and a fallback saying %q\n%s", g.FilledFrom, g.FillFallback, reason, b.proc)
	}
	if out := b.proc.Output(); !strings.Contains(out, "peer fill failed: reading the files instead") || !strings.Contains(out, reason) {
		t.Errorf("B's log does not give the fallback and its reason %q:\n%s", reason, out)
	}
	if code, out := b.attach(t, m.Dir); code != 0 {
		t.Errorf("attach --verify to B: exit %d\n%s", code, out)
	}
}

// TestDaemonFilledAcrossHosts: daemon B, given daemon A as its peer, fills
// its checkpoint from A over mutual TLS: Status says so, the bytes an
// attach reads equal the checkpoint's, B's backend plugin read far less
// than the checkpoint (a load from files reads all of it: the plugin does
// the reads), and the content digests B knew for its files were proven
// from the received bytes (an attach proves its files by identity).
func TestDaemonFilledAcrossHosts(t *testing.T) {
	m := model(t)
	ca := peertest.NewCA(t, "wcache test CA")
	d := startA(t, m.Dir, ca.Issue(t, "node-a", ca))
	d.b.cacheDigests(t, m)
	d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)

	if g := generation(t, d.b); g.FilledFrom != "peer "+d.peerAt || g.FillFallback != "" {
		t.Fatalf("B's Status: filled_from %q, fill_fallback %q: want %q\n%s", g.FilledFrom, g.FillFallback, "peer "+d.peerAt, d.b.proc)
	}
	plugin, err := testproc.PluginPID(d.b.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	if read := readChars(t, plugin); read > m.Bytes/4 {
		t.Errorf("B's plugin read %d bytes, the checkpoint has %d: it read the files", read, m.Bytes)
	}
	if code, out := d.b.attach(t, m.Dir); code != 0 {
		t.Fatalf("attach --verify to B: exit %d\n%s", code, out)
	}

	if !strings.Contains(d.b.proc.Output(), "filled from peer") {
		t.Errorf("B's log does not say it filled from the peer:\n%s", d.b.proc)
	}
}

// TestDaemonPeerOfAnotherCA: daemon A's certificate comes from another CA:
// B refuses it in the handshake, logs the fallback and loads its files.
func TestDaemonPeerOfAnotherCA(t *testing.T) {
	m := model(t)
	ca, other := peertest.NewCA(t, "wcache test CA"), peertest.NewCA(t, "someone else's CA")
	d := startA(t, m.Dir, other.Issue(t, "rogue", other))
	d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)
	wantFiles(t, d.b, m, "certificate")
	plugin, err := testproc.PluginPID(d.b.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	if read := readChars(t, plugin); read < m.Bytes {
		t.Errorf("B's plugin read %d bytes, less than the checkpoint's %d, yet B says it loaded the files", read, m.Bytes)
	}
}

// TestDaemonPeerKilledMidStream: daemon A (its endpoint rate-bounded so the
// stream lasts) is SIGKILLed once it has sent part of the checkpoint: B's
// fill fails, what it allocated is freed, and it serves the files' bytes.
func TestDaemonPeerKilledMidStream(t *testing.T) {
	m := model(t)
	ca := peertest.NewCA(t, "wcache test CA")
	d := startA(t, m.Dir, ca.Issue(t, "node-a", ca), "--peer-rate", "2MiB")
	before := procIO(t, d.a.proc.PID()).WChar
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		// A has sent a third of the checkpoint: kill it mid-stream.
		_ = d.a.proc.WaitFor(context.Background(), "A sending", startTimeout, func() bool {
			return procIO(t, d.a.proc.PID()).WChar > before+m.Bytes/3
		})
		d.a.proc.Kill()
	}()
	d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)
	<-killed
	if !d.a.proc.Exited() {
		t.Fatal("A was not killed")
	}
	wantFiles(t, d.b, m, "cross-node fill: peer "+d.peerAt)
	if st := d.b.status(t); len(st.Generations) != 1 {
		t.Errorf("B holds %d generations, want the files' one", len(st.Generations))
	}
}

// TestDaemonPeerOfOtherContent: daemon A serves a fine-tune of the same
// shapes (same checkpoint digest, same weights identity, other tensor
// values: from B, what A's memory written since it loaded looks like). B
// proves the received bytes against what its own files hold, never A's
// word: knowing its files' content digests (the digest cache), or knowing
// nothing and hashing its files while the bytes arrive. Either way it
// refuses them, says why, and serves its files (attach --verify by
// identity exits 0).
func TestDaemonPeerOfOtherContent(t *testing.T) {
	m := model(t)
	tuned := fineTune(t, m)
	ca := peertest.NewCA(t, "wcache test CA")
	d := startA(t, tuned, ca.Issue(t, "node-a", ca))
	t.Run("known content", func(t *testing.T) {
		d.b.cacheDigests(t, m)
		d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)
		wantFiles(t, d.b, m, "content digest mismatch")
		d.b.proc.Kill()
	})
	t.Run("unknown content, hashed here", func(t *testing.T) {
		b := newNode(t, d.b.h)
		b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)
		wantFiles(t, b, m, "(hashed the local file): the source's memory is not these files")
	})
}

// TestDaemonFilledAcrossHostsHashingItsFiles: B knows nothing of its
// files (empty digest cache, no hub blob): it hashes them while A's bytes
// arrive, and the fill, proven against them, records the local files'
// identity (an attach proves its files by a stat and --verify passes).
func TestDaemonFilledAcrossHostsHashingItsFiles(t *testing.T) {
	m := model(t)
	ca := peertest.NewCA(t, "wcache test CA")
	d := startA(t, m.Dir, ca.Issue(t, "node-a", ca))
	d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)
	g := generation(t, d.b)
	if g.FilledFrom != "peer "+d.peerAt || g.FillFallback != "" {
		t.Fatalf("B's Status: filled_from %q, fill_fallback %q: want %q\n%s", g.FilledFrom, g.FillFallback, "peer "+d.peerAt, d.b.proc)
	}
	if !strings.Contains(d.b.proc.Output(), "hashing the local files whose content is not known") {
		t.Errorf("B's log does not say it hashed its files:\n%s", d.b.proc)
	}
	for _, f := range g.Files {
		fi, err := os.Stat(f.Path)
		if err != nil || f.Identity != safetensors.StampOf(fi) {
			t.Errorf("B's record of %s: %+v, want the local file's identity (%v)", f.Name, f.Identity, err)
		}
	}
	if code, out := d.b.attach(t, m.Dir); code != 0 {
		t.Errorf("attach --verify to B by identity: exit %d\n%s", code, out)
	}
}

// TestDaemonFilledIntoDeviceArenas: daemon B's plugin exports no memfd
// (the mock's posix-shm handles: to the daemon, what a GPU's device memory
// is), so B stages the received bytes in memfds, window by window, and its
// plugin process Loads each from /proc/<B's pid>/fd/<n>: B is filled from
// A, the content digests collected from the staged bytes prove the files B
// knew, an attach (by identity, --verify) reads the checkpoint's bytes,
// and no staging memfd is left open in B or its plugin.
func TestDaemonFilledIntoDeviceArenas(t *testing.T) {
	m := model(t)
	ca := peertest.NewCA(t, "wcache test CA")
	d := startA(t, m.Dir, ca.Issue(t, "node-a", ca))
	d.b.w.Setenv("WCACHE_MOCK_HANDLE=posix-shm")
	d.b.cacheDigests(t, m) // B knows its files' content: the digests collected while staging must prove it
	d.b.serve(t, m.Dir, append([]string{"--peers", d.peerAt}, certArgs(ca.Issue(t, "node-b", ca))...)...)

	if g := generation(t, d.b); g.FilledFrom != "peer "+d.peerAt || g.FillFallback != "" {
		t.Fatalf("B's Status: filled_from %q, fill_fallback %q: want %q\n%s", g.FilledFrom, g.FillFallback, "peer "+d.peerAt, d.b.proc)
	}
	if !strings.Contains(d.b.proc.Output(), "loaded through staging memfds") {
		t.Errorf("B's log does not say it loaded through staging memfds (were its arenas memfd?):\n%s", d.b.proc)
	}
	if code, out := d.b.attach(t, m.Dir); code != 0 {
		t.Fatalf("attach --verify to B: exit %d\n%s", code, out)
	}
	plugin, err := testproc.PluginPID(d.b.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{d.b.proc.PID(), plugin} {
		if n := stagingMemfds(t, pid); n != 0 {
			t.Errorf("process %d holds %d staging memfds after the fill", pid, n)
		}
	}
}

// stagingMemfds counts the descriptors of pid that are a daemon's staging
// memfds ("/memfd:wcache-peer-stage").
func stagingMemfds(t *testing.T, pid int) int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.Contains(target, "memfd:wcache-peer-stage") {
			n++
		}
	}
	return n
}
