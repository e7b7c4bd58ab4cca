package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/client/clienttest"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/test/testproc"
)

// nobody is the uid/gid tests use for "another user".
const nobody = 65534

// attachJSON is the part of `wcache attach --json` the tests read.
type attachJSON struct {
	DeviceUUID   string `json:"device_uuid"`
	Socket       string `json:"socket"`
	ConfigDigest string `json:"config_digest"`
	Tensors      int    `json:"tensors"`
	Bytes        uint64 `json:"bytes"`
	Handles      []struct {
		Kind string `json:"kind"`
		Size uint64 `json:"size"`
		Data []byte `json:"data"`
	} `json:"handles"`
	Verified bool `json:"verified"`
}

func parseAttach(t *testing.T, res cliResult) attachJSON {
	t.Helper()
	var a attachJSON
	if err := json.Unmarshal([]byte(res.Stdout), &a); err != nil {
		t.Fatalf("attach --json output: %v\n%s", err, res)
	}
	return a
}

// layout is the default layout in the harness's environment.
func (h *harness) layout() paths.Layout {
	h.t.Helper()
	l, err := h.Layout()
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// clientConfig is the CacheConfig an engine would send for the checkpoint
// in dir on a mock device: defaults, the model path and the header digest
// of the whole checkpoint, or of files when given (pre-sharded ranks).
func clientConfig(t *testing.T, dir string, files ...string) cacheconfig.Config {
	t.Helper()
	c, err := testproc.EngineConfig(dir, "mock", files...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// attachGo attaches from the test process with core/client, as a Go engine
// would, by device UUID.
func (h *harness) attachGo(uuid string, cfg cacheconfig.Config) (*client.Attachment, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Attach(ctx, client.ByDeviceUUID(h.layout(), uuid), cfg, client.Options{ClientName: h.t.Name()})
}

// mustAttachGo is attachGo that fails the test on an error and closes the
// lease at the test's cleanup.
func (h *harness) mustAttachGo(uuid string, cfg cacheconfig.Config) *client.Attachment {
	h.t.Helper()
	a, err := h.attachGo(uuid, cfg)
	if err != nil {
		h.t.Fatalf("attach to %s as %s: %v", uuid, cfg.Model, err)
	}
	h.t.Cleanup(func() { a.Lease.Close() })
	return a
}

// mustDialGo dials the daemon of mock GPU gpu with the Go client, failing
// the test on an error; the connection closes at the test's cleanup.
func (h *harness) mustDialGo(gpu int) *client.Client {
	h.t.Helper()
	c, err := client.Dial(context.Background(), client.ByDeviceUUID(h.layout(), h.UUIDs[gpu]), client.Options{})
	if err != nil {
		h.t.Fatalf("dial the daemon of GPU %d: %v", gpu, err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// checkLeaseLives fails t if lease has ended: it should have lived through
// what the caller did (named in through).
func checkLeaseLives(t *testing.T, lease *client.Lease, through string) {
	t.Helper()
	select {
	case <-lease.Done():
		t.Fatalf("lease %d ended through %s: %v", lease.ID(), through, lease.Err())
	default:
	}
}

// checkBytes maps every handle of a manifest and compares every tensor with
// the checkpoint's bytes for rank.
func checkBytes(t *testing.T, m *client.Manifest, model *safetensorstest.Result, rank int) {
	t.Helper()
	checkBytesWith(t, client.DefaultMappers(), m, model, rank)
}

// checkBytesWith is checkBytes mapping with the mappers of reg.
func checkBytesWith(t *testing.T, reg *client.Mappers, m *client.Manifest, model *safetensorstest.Result, rank int) {
	t.Helper()
	ts, err := reg.Map(m)
	if err != nil {
		t.Fatalf("map the manifest: %v", err)
	}
	t.Cleanup(func() { ts.Close() })
	want := 0
	for _, gt := range model.Tensors {
		if gt.Rank == rank {
			want++
		}
	}
	if len(m.Tensors) != want {
		t.Fatalf("manifest has %d tensors, the checkpoint rank %d has %d", len(m.Tensors), rank, want)
	}
	for _, tn := range m.Tensors {
		gen, ok := model.Tensor(rank, tn.Name)
		if !ok {
			t.Fatalf("manifest tensor %s is not in the checkpoint", tn.Name)
		}
		mt, ok := ts.Get(tn.Name)
		if !ok {
			t.Fatalf("tensor %s is in the manifest but not in its mapping", tn.Name)
		}
		if !bytes.Equal(mt.Data, gen.Data()) {
			t.Fatalf("tensor %s: mapped bytes differ from %s", tn.Name, gen.File)
		}
	}
}

// TestSeedTwoJobsEachFindTheirOwnDaemon is the bug wcache exists to avoid:
// two independent jobs on one host, each with TP rank 0 on a different
// GPU. With rank-keyed paths they would share one socket; keyed by device
// UUID each job's client reaches its own daemon and its own weights. Each
// job sees only its GPUs (as with CUDA_VISIBLE_DEVICES), so both use ordinal 0.
func TestSeedTwoJobsEachFindTheirOwnDaemon(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 4})
	modelA := genModel(t, filepath.Join(h.Root, "a"), safetensorstest.GenOptions{Seed: 1})
	// Another model: the checkpoint digest covers headers, not bytes.
	modelB := genModel(t, filepath.Join(h.Root, "b"), safetensorstest.GenOptions{Seed: 2, Layers: 3})
	jobEnv := func(visible ...string) func(*exec.Cmd) {
		return func(c *exec.Cmd) { c.Env = append(c.Env, "WCACHE_MOCK_DEVICES="+strings.Join(visible, ",")) }
	}
	job1 := jobEnv(h.UUIDs[1], h.UUIDs[0])
	job2 := jobEnv(h.UUIDs[3], h.UUIDs[2])

	d1 := h.startWith(job1, serveArgs(0, modelA.Dir, "--tp-rank", "0")...)
	h.waitReady(d1, h.Paths(h.UUIDs[1]).Ready)
	d2 := h.startWith(job2, serveArgs(0, modelB.Dir, "--tp-rank", "0")...)
	h.waitReady(d2, h.Paths(h.UUIDs[3]).Ready)

	for _, job := range []struct {
		env   func(*exec.Cmd)
		uuid  string
		model *safetensorstest.Result
		other *safetensorstest.Result
	}{{job1, h.UUIDs[1], modelA, modelB}, {job2, h.UUIDs[3], modelB, modelA}} {
		res := h.runWith(job.env, "attach", "--backend", "mock", "--gpu-id", "0", "--model", job.model.Dir,
			"--tp-rank", "0", "--json", "--verify")
		if res.Code != 0 {
			t.Fatalf("%s", res)
		}
		a := parseAttach(t, res)
		if a.DeviceUUID != job.uuid || !a.Verified {
			t.Fatalf("job attached to %s (verified %v), want its own device %s", a.DeviceUUID, a.Verified, job.uuid)
		}
		// The Go client sees the same daemon and the job's own bytes.
		att, err := h.attachGo(job.uuid, clientConfig(t, job.model.Dir))
		if err != nil {
			t.Fatal(err)
		}
		if att.Manifest.DeviceUUID != job.uuid {
			t.Fatalf("manifest device %s, want %s", att.Manifest.DeviceUUID, job.uuid)
		}
		checkBytes(t, att.Manifest, job.model, 0)
		att.Lease.Close()
		// The other job's weights on this device are refused, not served.
		res = h.runWith(job.env, "attach", "--backend", "mock", "--gpu-id", "0", "--model", job.other.Dir)
		if res.Code != 4 || !strings.Contains(res.Stderr, "checkpoint_digest") {
			t.Fatalf("attaching the other job's model: want exit 4 naming checkpoint_digest\n%s", res)
		}
	}
	// GPUs 0 and 2 have no daemon: only their absence allows a disk fallback.
	for _, gpu := range []string{"1"} {
		res := h.runWith(job1, "attach", "--backend", "mock", "--gpu-id", gpu, "--model", modelA.Dir)
		if res.Code != 3 || !strings.Contains(res.Stderr, h.UUIDs[0]) {
			t.Fatalf("attach on a GPU without daemon: want exit 3 naming %s\n%s", h.UUIDs[0], res)
		}
	}
}

// TestTemplateWithoutUUIDTouchesNothing: every GPU would share one path, so
// serve and attach refuse such a template (exit 2) before creating anything.
func TestTemplateWithoutUUIDTouchesNothing(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	bad := filepath.Join(h.Root, "run", "daemon-rank0.sock")
	cases := [][]string{
		serveArgs(0, model.Dir, "--socket-template", bad),
		serveArgs(0, model.Dir, "--ready-template", filepath.Join(h.Root, "run", "ready.json")),
		{"attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir, "--socket-template", bad},
	}
	for _, args := range cases {
		res := h.run(args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "{device_uuid}") {
			t.Errorf("want exit 2 explaining {device_uuid}\n%s", res)
		}
	}
	res := h.runWith(func(c *exec.Cmd) { c.Env = append(c.Env, paths.EnvSocketTemplate+"="+bad) }, serveArgs(0, model.Dir)...)
	if res.Code != 2 || !strings.Contains(res.Stderr, paths.EnvSocketTemplate) {
		t.Errorf("template from the environment: want exit 2 naming %s\n%s", paths.EnvSocketTemplate, res)
	}
	for _, dir := range []string{h.RuntimeDir, h.MockDir} {
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s is not empty: %v", dir, entries)
		}
	}
}

// TestFallbackRules: only an absent socket means "no daemon" (exit 3, the
// one case an engine may load from disk); anything suspicious is refused.
func TestFallbackRules(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	h.startServe(0, model.Dir)
	live := h.Paths(h.UUIDs[0]).Socket
	dir := filepath.Join(h.Root, "s")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	regular, link := pathstest.NotSockets(t, dir, live)
	foreign := filepath.Join(dir, "foreign")
	fl, err := net.Listen("unix", foreign)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if err := os.Lchown(foreign, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, "dead")
	pathstest.DeadSocket(t, dead)

	for _, c := range []struct {
		socket string
		code   int
		says   string
	}{
		{filepath.Join(dir, "absent"), 3, "does not exist"},
		{regular, 1, "regular file, not a socket"},
		{link, 1, "symlink"},
		{foreign, 1, "owned by uid 65534"},
		{dead, 1, "connection was refused"},
		{live, 0, ""},
	} {
		res := h.run("attach", "--socket", c.socket, "--model", model.Dir, "--device-capability", "mock")
		if res.Code != c.code || !strings.Contains(res.Stderr, c.says) {
			t.Errorf("%s: want exit %d saying %q\n%s", filepath.Base(c.socket), c.code, c.says, res)
		}
	}
}

// TestDaemonRejectsOtherUID: a client of another user that can reach the
// socket (through --socket-group) is still refused by the daemon's
// SO_PEERCRED check unless its uid or gid is allowed.
func TestDaemonRejectsOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs as root (it spawns a client as uid 65534)")
	}
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 2})
	shared := filepath.Join(h.Root, "shared")
	if err := os.Mkdir(shared, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, nobody); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{h.Root, model.Dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := []string{"--socket-template", filepath.Join(shared, "{device_uuid}.sock"),
		"--ready-template", filepath.Join(shared, "{device_uuid}.ready"), "--socket-group", fmt.Sprint(nobody)}
	asNobody := func(c *exec.Cmd) {
		c.SysProcAttr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
		c.Env = append(c.Env, "HOME=/")
	}
	for gpu, extra := range [][]string{nil, {"--allow-gid", fmt.Sprint(nobody)}} {
		d := h.start(serveArgs(gpu, model.Dir, append(tmpl, extra...)...)...)
		h.waitReady(d, filepath.Join(shared, h.UUIDs[gpu]+".ready"))
		sock := filepath.Join(shared, h.UUIDs[gpu]+".sock")
		if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
			t.Fatalf("socket with --socket-group: %v %v, want mode 0660", fi.Mode(), err)
		}
		res := h.runWith(asNobody, "attach", "--socket", sock, "--allow-owner", "0", "--model", model.Dir,
			"--device-capability", "mock")
		if extra == nil {
			if res.Code != 1 || !strings.Contains(res.Stderr, "PermissionDenied") || !strings.Contains(res.Stderr, "uid 65534") {
				t.Errorf("uid 65534 without allow-list: want a PermissionDenied naming the uid\n%s", res)
			}
		} else if res.Code != 0 {
			t.Errorf("uid 65534 with --allow-gid 65534: %s", res)
		}
	}
}

// TestMismatchListsFieldsThenMatchAttaches: a config mismatch exits 4 and
// lists every differing field with both values.
func TestMismatchListsFieldsThenMatchAttaches(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	h.startServe(0, model.Dir, "--dtype", "bf16", "--extra", "attn_dp=2")
	base := []string{"attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir}
	res := h.run(append(base, "--tp-size", "2", "--tp-rank", "1", "--dtype", "fp16")...)
	if res.Code != 4 {
		t.Fatalf("want exit 4\n%s", res)
	}
	for _, want := range []string{`tp_size: daemon="1" client="2"`, `tp_rank: daemon="0" client="1"`,
		`dtype: daemon="bf16" client="fp16"`, `extra.attn_dp: daemon="2" client=<absent>`} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("stderr lacks %s\n%s", want, res)
		}
	}
	res = h.run(append(base, "--dtype", "bf16", "--extra", "attn_dp=2", "--json")...)
	if res.Code != 0 || parseAttach(t, res).DeviceUUID != h.UUIDs[0] {
		t.Fatalf("matching attach: %s", res)
	}
}

// TestPreShardedRankFiles: a daemon serving one rank of a pre-sharded
// checkpoint holds exactly that rank's bytes.
func TestPreShardedRankFiles(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 2})
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{TPSize: 2, Shards: 2})
	pattern := "model-rank-{tp_rank}-part-*.safetensors"
	for rank := 0; rank < 2; rank++ {
		h.startServe(rank, model.Dir, "--shard-pattern", pattern, "--tp-size", "2", "--tp-rank", fmt.Sprint(rank))
		cfg := clientConfig(t, model.Dir, model.RankFiles(rank)...)
		cfg.TPSize, cfg.TPRank = 2, uint32(rank)
		res := h.run("attach", "--backend", "mock", "--gpu-id", fmt.Sprint(rank), "--model", model.Dir,
			"--shard-pattern", pattern, "--tp-size", "2", "--tp-rank", fmt.Sprint(rank), "--verify")
		if res.Code != 0 {
			t.Fatalf("%s", res)
		}
		a, err := h.attachGo(h.UUIDs[rank], cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkBytes(t, a.Manifest, model, rank)
		a.Lease.Close()
	}
}

// TestManyConcurrentClients: 64 clients attach and release repeatedly; no
// error, and the daemon leaks neither descriptors nor goroutines.
func TestManyConcurrentClients(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d := h.startServe(0, model.Dir)
	cfg := clientConfig(t, model.Dir)
	c := h.mustDialGo(0)
	const clients, rounds = 64, 5
	attachRounds := func(rounds int) {
		t.Helper()
		err := clienttest.AttachRounds(clients, rounds, func() (*client.Attachment, error) { return h.attachGo(h.UUIDs[0], cfg) })
		if err != nil {
			t.Fatal(err)
		}
	}
	// One warm-up round first: the first attaches start goroutines that live
	// as long as the daemon (gRPC transport and plugin-connection workers),
	// which are not leaks. The baseline is what a warm daemon runs.
	attachRounds(1)
	before := waitQuiet(t, c, d.PID(), nil)
	attachRounds(rounds)
	// A leak proportional to attaches would show hundreds; allow two
	// goroutines of scheduling noise (a transport goroutine that has not yet
	// exited), none for descriptors or leases.
	waitQuiet(t, c, d.PID(), func(now quietSample) error {
		if len(now.leases) == 0 && now.goroutines <= before.goroutines+2 && now.fds <= before.fds {
			return nil
		}
		return fmt.Errorf("leak after %d attaches: leases %d, goroutines %d → %d, fds %d → %d",
			clients*rounds, len(now.leases), before.goroutines, now.goroutines, before.fds, now.fds)
	})
}

type quietSample struct {
	leases     []uint64
	goroutines int
	fds        int
}

// waitQuiet polls the daemon until ok accepts a sample (or, with ok nil,
// until no lease is left and two samples agree), failing the test after 10 s.
func waitQuiet(t *testing.T, c *client.Client, pid int, ok func(quietSample) error) quietSample {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var prev *quietSample
	for {
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		fds, err := countFDs(pid)
		if err != nil {
			t.Fatal(err)
		}
		now := quietSample{goroutines: st.Goroutines, fds: fds}
		for _, l := range st.Leases {
			now.leases = append(now.leases, l.ID)
		}
		var verdict error
		if ok != nil {
			verdict = ok(now)
		} else if len(now.leases) != 0 || prev == nil || prev.goroutines != now.goroutines || prev.fds != now.fds {
			verdict = fmt.Errorf("daemon not quiet: leases %d, goroutines %d, fds %d", len(now.leases), now.goroutines, now.fds)
		}
		if verdict == nil {
			return now
		}
		if time.Now().After(deadline) {
			t.Fatal(verdict)
		}
		prev = &now
		time.Sleep(100 * time.Millisecond)
	}
}
