package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/sdk/names"
)

// Environment of the fd-fetch helper: the daemon's socket, the lease id
// and the hex token to ask for.
const (
	fdLeaseEnv = "WCACHE_E2E_FD_LEASE"
	fdTokenEnv = "WCACHE_E2E_FD_TOKEN"
)

// runFDFetchHelper asks the descriptor channel for a lease's descriptors
// and prints "got N" or "refused STATUS: MESSAGE" (exit 0), or an error
// (exit 1). The tests run it as another uid.
func runFDFetchHelper() int {
	id, err := strconv.ParseUint(os.Getenv(fdLeaseEnv), 10, 64)
	token, terr := hex.DecodeString(os.Getenv(fdTokenEnv))
	if err != nil || terr != nil || len(token) != fdchannel.TokenSize {
		fmt.Fprintln(os.Stderr, "fd-fetch: bad lease or token", err, terr)
		return 2
	}
	req := fdchannel.Request{Op: fdchannel.OpLease, ID: id}
	copy(req.Token[:], token)
	got, err := fdchannel.Fetch(context.Background(), fdchannel.Path(os.Getenv(helperSocketEnv)), req)
	var re *fdchannel.RefusedError
	switch {
	case errors.As(err, &re):
		fmt.Printf("refused %s: %s\n", re.Status, re.Message)
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fdchannel.CloseAll(got)
	fmt.Printf("got %d\n", len(got))
	return 0
}

// attachInProcess attaches this test process to the daemon of mock GPU gpu
// with the config of ck.
func (h *harness) attachInProcess(gpu int, model *safetensorstest.Result) *client.Attachment {
	h.t.Helper()
	ck := clientConfig(h.t, model.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	att, err := client.Attach(ctx, client.BySocket(h.Paths(h.UUIDs[gpu]).Socket), ck, client.Options{ClientName: "fd-test"})
	if err != nil {
		h.t.Fatalf("attach: %v", err)
	}
	h.t.Cleanup(func() { _ = att.Lease.Close() })
	return att
}

// fetch asks the descriptor channel of GPU gpu for lease id with token.
func (h *harness) fetch(gpu int, id uint64, token []byte) ([]fdchannel.Descriptor, error) {
	req := fdchannel.Request{Op: fdchannel.OpLease, ID: id}
	copy(req.Token[:], token)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return fdchannel.Fetch(ctx, fdchannel.Path(h.Paths(h.UUIDs[gpu]).Socket), req)
}

// wantRefused checks that err is a refusal with status want.
func wantRefused(t *testing.T, what string, ds []fdchannel.Descriptor, err error, want fdchannel.Status) {
	t.Helper()
	fdchannel.CloseAll(ds)
	var re *fdchannel.RefusedError
	if !errors.As(err, &re) || re.Status != want {
		t.Errorf("%s: got %d descriptors, error %v; want a refusal %q", what, len(ds), err, want)
	}
}

// TestDescriptorChannelDeliversExactlyTheManifest: a lease gets one
// read-only, size-sealed memfd per handle of its manifest and nothing
// else; a wrong token, a lease that never was, lease 0 and a closed lease
// are all refused, and the channel sits beside the socket with its mode.
func TestDescriptorChannelDeliversExactlyTheManifest(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	// Small arenas: several handles, so "exactly the manifest's" means
	// something.
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{})
	h.startServe(0, model.Dir, "--max-arena-bytes", "65536")
	sock := h.Paths(h.UUIDs[0]).Socket
	fi, err := os.Lstat(fdchannel.Path(sock))
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("descriptor channel %s: %v, %v; want a 0600 socket", fdchannel.Path(sock), fi.Mode(), err)
	}
	att := h.attachInProcess(0, model)
	m := att.Manifest
	if len(m.Handles) < 2 || len(m.FDToken) != fdchannel.TokenSize {
		t.Fatalf("manifest: %d handles, token of %d bytes; want several memfd handles and a 32-byte token", len(m.Handles), len(m.FDToken))
	}
	ds, err := h.fetch(0, m.LeaseID, m.FDToken)
	if err != nil {
		t.Fatalf("fetch with the lease's token: %v", err)
	}
	defer fdchannel.CloseAll(ds)
	if len(ds) != len(m.Handles) {
		t.Fatalf("got %d descriptors for %d handles", len(ds), len(m.Handles))
	}
	for i, d := range ds {
		h := m.Handles[i]
		if h.Kind != names.KindMemfd || int(d.Handle) != i || d.Size != h.Size {
			t.Errorf("descriptor %d: handle %d of %d bytes, manifest handle %d is %s of %d", i, d.Handle, d.Size, i, h.Kind, h.Size)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(d.File.Fd()), &st); err != nil || uint64(st.Size) != h.Size {
			t.Errorf("descriptor %d: fstat %v, size %d, want %d", i, err, st.Size, h.Size)
		}
		seals, err := unix.FcntlInt(d.File.Fd(), unix.F_GET_SEALS, 0)
		if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
			t.Errorf("descriptor %d: seals %#x (%v), want F_SEAL_SHRINK", i, seals, err)
		}
		flags, err := unix.FcntlInt(d.File.Fd(), unix.F_GETFL, 0)
		if err != nil || flags&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("descriptor %d: open flags %#x (%v), want read-only", i, flags, err)
		}
		if _, err := unix.Mmap(int(d.File.Fd()), 0, int(h.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
			t.Errorf("descriptor %d: mapped writable; a lease's descriptor must be read-only", i)
		}
	}
	// The mapped bytes are the checkpoint's.
	if _, err := client.Verify(context.Background(), m, safetensorstest.Open(t, model.Dir), client.VerifyOptions{}); err != nil {
		t.Errorf("verify through the received descriptors: %v", err)
	}

	wrong := append([]byte(nil), m.FDToken...)
	wrong[0] ^= 1
	ds2, err := h.fetch(0, m.LeaseID, wrong)
	wantRefused(t, "wrong token", ds2, err, fdchannel.StatusBadToken)
	ds2, err = h.fetch(0, m.LeaseID+1000, m.FDToken)
	wantRefused(t, "a lease that never was", ds2, err, fdchannel.StatusNoLease)
	ds2, err = h.fetch(0, 0, m.FDToken)
	wantRefused(t, "lease 0 (no lease)", ds2, err, fdchannel.StatusNoLease)
	if err := att.Lease.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ds2, err = h.fetch(0, m.LeaseID, m.FDToken)
		var re *fdchannel.RefusedError
		if errors.As(err, &re) || time.Now().After(deadline) {
			break
		}
		fdchannel.CloseAll(ds2)
		time.Sleep(20 * time.Millisecond) // the daemon notices the closed stream
	}
	wantRefused(t, "a closed lease", ds2, err, fdchannel.StatusNoLease)
}

// TestDescriptorChannelRefusesOtherUID: a process of another uid that can
// reach the channel (--socket-group) is refused by SO_PEERCRED, and even
// an allowed uid cannot take the descriptors of a lease that is not its own.
func TestDescriptorChannelRefusesOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as uid 65534 (SysProcAttr.Credential)")
	}
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 2})
	// The helper is this test binary: a copy nobody may run.
	shared, helper := sharedWithNobody(t, h)
	tmpl := []string{"--socket-template", filepath.Join(shared, "{device_uuid}.sock"),
		"--ready-template", filepath.Join(shared, "{device_uuid}.ready"), "--socket-group", fmt.Sprint(nobody)}
	for gpu, extra := range [][]string{nil, {"--allow-gid", fmt.Sprint(nobody)}} {
		d := h.start(serveArgs(gpu, model.Dir, append(tmpl, extra...)...)...)
		h.waitReady(d, filepath.Join(shared, h.UUIDs[gpu]+".ready"))
		sock := filepath.Join(shared, h.UUIDs[gpu]+".sock")
		if fi, err := os.Stat(fdchannel.Path(sock)); err != nil || fi.Mode().Perm() != 0o660 {
			t.Fatalf("descriptor channel with --socket-group: %v %v, want mode 0660", fi.Mode(), err)
		}
		ck := clientConfig(t, model.Dir)
		att, err := client.Attach(context.Background(), client.BySocket(sock), ck, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer att.Lease.Close()
		cmd := exec.Command(helper)
		cmd.Env = append(os.Environ(), helperEnv+"=fd-fetch", helperSocketEnv+"="+sock,
			fdLeaseEnv+"="+fmt.Sprint(att.Manifest.LeaseID), fdTokenEnv+"="+hex.EncodeToString(att.Manifest.FDToken))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid %d: %v\n%s", nobody, err, out)
		}
		want := "refused permission denied: peer uid 65534"
		if extra != nil {
			want = "refused permission denied: lease 1 belongs to uid 0, the request comes from uid 65534"
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("uid %d with %v: %q, want %q", nobody, extra, out, want)
		}
	}
}

// sharedWithNobody prepares what a test that runs a client as uid 65534
// needs: h.Root readable by all, a folder "shared" (0750, group 65534) for
// sockets and ready files the daemon opens to that group, and a copy of
// this test binary (the helper process) that uid 65534 may run. It
// returns the folder and the helper's path.
func sharedWithNobody(t *testing.T, h *harness) (shared, helper string) {
	t.Helper()
	shared = filepath.Join(h.Root, "shared")
	if err := os.Mkdir(shared, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, nobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(h.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper = filepath.Join(h.Root, "fd-helper")
	pathstest.CopyFile(t, exe, helper, 0o755)
	return shared, helper
}

// fdFloodConns is how many connections the fd-flood helper opens.
const fdFloodConns = 2000

// runFDFloodHelper opens fdFloodConns connections to the descriptor
// channel and holds them (sending nothing), prints "connected N" for those
// the kernel accepted, and exits when stdin closes.
func runFDFloodHelper() int {
	path := fdchannel.Path(os.Getenv(helperSocketEnv))
	var held []net.Conn
	for range fdFloodConns {
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			continue
		}
		held = append(held, c)
	}
	fmt.Printf("connected %d\n", len(held))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
	return 0
}

// TestDescriptorChannelBoundsADeniedPeer: a uid the daemon denies, able to
// reach the channel (--socket-group), opens 2,000 connections and holds
// them. The daemon keeps at most a couple of them (the gRPC socket's
// denied-peer bound), so its descriptors stay few, and the daemon's own
// uid attaches and receives its descriptors meanwhile.
func TestDescriptorChannelBoundsADeniedPeer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as uid 65534 (SysProcAttr.Credential)")
	}
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	shared, helper := sharedWithNobody(t, h)
	sock := filepath.Join(shared, h.UUIDs[0]+".sock")
	d := h.start(serveArgs(0, model.Dir, "--socket-template", filepath.Join(shared, "{device_uuid}.sock"),
		"--ready-template", filepath.Join(shared, "{device_uuid}.ready"), "--socket-group", fmt.Sprint(nobody))...)
	h.waitReady(d, filepath.Join(shared, h.UUIDs[0]+".ready"))
	base, err := countFDs(d.PID())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helper)
	cmd.Env = append(os.Environ(), helperEnv+"=fd-flood", helperSocketEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Stderr = os.Stderr
	stdin, stdout := childproc.StartPiped(t, cmd)
	defer func() { stdin.Close(); cmd.Wait() }()
	line := bufio.NewScanner(stdout)
	if !line.Scan() || !strings.HasPrefix(line.Text(), "connected ") {
		t.Fatalf("the flood helper said %q (%v)", line.Text(), line.Err())
	}
	flood := line.Text()
	t.Logf("uid %d: %s of %d", nobody, flood, fdFloodConns)
	// Every connection the kernel queued has been accepted or is waiting
	// in the backlog; an attach goes through the same queue, after them.
	att, err := client.Attach(context.Background(), client.BySocket(sock), clientConfig(t, model.Dir), client.Options{})
	if err != nil {
		t.Fatalf("attach during the flood (%s): %v", flood, err)
	}
	defer att.Lease.Close()
	checkBytes(t, att.Manifest, model, 0)
	n, err := countFDs(d.PID())
	if err != nil {
		t.Fatal(err)
	}
	// The daemon holds its lease's connection and descriptors, and at most
	// two of the flood's connections; never hundreds.
	if n > base+64 {
		t.Fatalf("the daemon holds %d descriptors during the flood (%d before; %s)", n, base, flood)
	}
}
