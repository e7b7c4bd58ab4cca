package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/test/testproc"
)

// The authz-probe helper (runAuthzProbe) reads these.
const (
	probeOpEnv    = "WCACHE_E2E_PROBE_OP"
	probeModelEnv = "WCACHE_E2E_PROBE_MODEL"
	probeOwnerEnv = "WCACHE_E2E_PROBE_OWNER"
)

// runAuthzProbe is the test binary as a client of some uid/gid calling one
// operation of the daemon at $helperSocketEnv ($probeOpEnv: an RPC name
// or a descriptor channel op) and printing its outcome on one line: "ok",
// "denied: MESSAGE" (PERMISSION_DENIED, or the channel's permission
// denied) or "other: MESSAGE". It exits 1 only when it could not ask.
//
// The descriptor channel ops of a peer that may not attach or publish are
// asked with lease/publish id 1 and a zero token: the table decides before
// any lease is looked up, so the answer is the class's. PUBLISH is asked so
// by every class (a real one is the Publish op's own fetch): "ok" then
// means the request passed authorization and found no such publish.
func runAuthzProbe() int {
	op, sock := os.Getenv(probeOpEnv), os.Getenv(helperSocketEnv)
	owner, err := strconv.ParseUint(os.Getenv(probeOwnerEnv), 10, 32)
	if err != nil {
		fmt.Fprintln(os.Stderr, "authz-probe: owner:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.BySocket(sock), client.Options{ClientName: "authz-probe " + op,
		AllowOwners: []uint32{uint32(owner)}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "authz-probe: dial:", err)
		return 1
	}
	defer c.Close()
	cfg, err := testproc.EngineConfig(os.Getenv(probeModelEnv), "mock")
	if err != nil {
		fmt.Fprintln(os.Stderr, "authz-probe: config:", err)
		return 1
	}
	fd := func(o fdchannel.Op, id uint64, token []byte) error {
		req := fdchannel.Request{Op: o, ID: id}
		copy(req.Token[:], token)
		if o == fdchannel.OpTakeover {
			tk, err := fdchannel.RequestTakeover(ctx, fdchannel.Path(sock), req)
			if err == nil {
				// Closed without "imported": the daemon serves on.
				fdchannel.CloseAll(tk.Descriptors)
				tk.Close()
			}
			return err
		}
		ds, err := fdchannel.Fetch(ctx, fdchannel.Path(sock), req)
		fdchannel.CloseAll(ds)
		return err
	}
	// withLease runs f on a lease of the probe's own, or on lease 1 with a
	// zero token when the probe may not attach.
	withLease := func(f func(id uint64, token []byte) error) error {
		a, err := c.Attach(ctx, cfg)
		if status.Code(errors.Unwrap(err)) == codes.PermissionDenied || status.Code(err) == codes.PermissionDenied {
			return f(1, nil)
		}
		if err != nil {
			return err
		}
		defer a.Lease.Close()
		return f(a.Manifest.LeaseID, a.Manifest.FDToken)
	}
	switch op {
	case "Status":
		_, err = c.Status(ctx)
	case "Attach":
		var a *client.Attachment
		if a, err = c.Attach(ctx, cfg); err == nil {
			a.Lease.Close()
		}
	case "Stop":
		_, err = c.Stop(ctx, true, 0)
	case "Publish":
		_, err = c.Publish(ctx, helperPublication(), client.ShmFill(func(i int, dst []byte) error { return nil }, false))
	case "Evict":
		_, err = c.EvictSelected(ctx, client.EvictSelector{Model: helperPublication().Config.Model}, 10*time.Second)
	case "descriptor channel LEASE":
		err = withLease(func(id uint64, token []byte) error { return fd(fdchannel.OpLease, id, token) })
	case "descriptor channel PUBLISH":
		err = fd(fdchannel.OpPublish, 1, nil)
		var re *fdchannel.RefusedError
		if errors.As(err, &re) && re.Status == fdchannel.StatusNoLease {
			err = nil // past the table: no publish 1
		}
	case "descriptor channel TAKEOVER":
		err = withLease(func(id uint64, token []byte) error { return fd(fdchannel.OpTakeover, id, token) })
	default:
		fmt.Fprintln(os.Stderr, "authz-probe: unknown op", op)
		return 1
	}
	var re *fdchannel.RefusedError
	switch {
	case err == nil:
		fmt.Println("ok")
	case errors.As(err, &re) && re.Status == fdchannel.StatusPermissionDenied:
		fmt.Println("denied: " + re.Message)
	case strings.Contains(err.Error(), "PermissionDenied") || strings.Contains(err.Error(), "permission denied"):
		fmt.Println("denied: " + err.Error())
	default:
		fmt.Println("other: " + err.Error())
	}
	return 0
}

// The uids and gids of TestGuestsUseOwnersSteer: none is a real account.
const (
	authzOwner    = 4242 // the daemon runs as this uid
	authzAllowUID = 4243 // --allow-uid
	authzGroup    = 4244 // --allow-gid and --socket-group
	authzGIDUser  = 4245 // a uid admitted by its primary gid authzGroup
	authzOther    = 4246 // reaches the socket (group member), not allowed
)

// authzClass is a client of TestGuestsUseOwnersSteer: its class name as
// docs/operations.md's table writes it, and its credentials.
type authzClass struct {
	name string
	cred syscall.Credential
}

// authzRow is one operation of the table and the classes allowed it, as
// docs/operations.md ("Who may do what") says.
type authzRow struct {
	op      string
	allowed []string
}

// TestGuestsUseOwnersSteer runs the table of docs/operations.md, "Who may
// do what", row by row with real processes: a daemon running as uid 4242
// with --allow-uid 4243, --allow-gid 4244 and --socket-group 4244, and the
// probe helper as root, as 4243, as a uid of primary gid 4244, as another
// uid of the group and as the owner. Each operation of each class is
// allowed or refused (PERMISSION_DENIED naming the operation and the
// class) as the table says; after the guests' tries, an owner's lease is
// still open and the daemon serves. Then root stops it, and the owner
// stops a second one.
func TestGuestsUseOwnersSteer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the daemon and its clients as other uids (SysProcAttr.Credential)")
	}
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	shared, helper := sharedWithNobody(t, h)
	// The daemon's own folders are the owner's; the clients reach only
	// the shared one (owner 4242, group 4244, 0750).
	for _, dir := range []string{h.RuntimeDir, h.MockDir, shared} {
		if err := os.Chown(dir, authzOwner, authzGroup); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(h.Root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(model.Dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shared, h.UUIDs[0]+".sock")
	// probeAs runs the probe of op as class; an error: it could not ask.
	probeAs := func(class authzClass, op string) (string, error) {
		cmd := exec.Command(helper)
		cmd.Env = append(h.Env(), "HOME=/", helperEnv+"=authz-probe", helperSocketEnv+"="+sock, probeOpEnv+"="+op,
			probeModelEnv+"="+model.Dir, probeOwnerEnv+"="+fmt.Sprint(authzOwner))
		cred := class.cred
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &cred}
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s%s", err, out, ee.Stderr)
		}
		return strings.TrimSpace(string(out)), err
	}
	owner := authzClass{"owner", syscall.Credential{Uid: authzOwner, Gid: authzOwner}}
	serve := func() *process {
		t.Helper()
		d := h.startWith(func(c *exec.Cmd) {
			c.SysProcAttr.Credential = &syscall.Credential{Uid: authzOwner, Gid: authzOwner, Groups: []uint32{authzGroup}}
			c.Env = append(c.Env, "HOME=/")
		}, serveArgs(0, model.Dir, "--socket-template", filepath.Join(shared, "{device_uuid}.sock"),
			"--ready-template", filepath.Join(shared, "{device_uuid}.ready"), "--socket-group", fmt.Sprint(authzGroup),
			"--allow-uid", fmt.Sprint(authzAllowUID), "--allow-gid", fmt.Sprint(authzGroup))...)
		// Serving once its owner's Status answers.
		deadline := time.Now().Add(readyTimeout)
		for {
			got, err := probeAs(owner, "Status")
			if err == nil && got == "ok" {
				return d
			}
			if code, exited := d.Wait(0); exited {
				t.Fatalf("daemon exited %d before it served (%q, %v)\n%s", code, got, err, d)
			}
			if time.Now().After(deadline) {
				t.Fatalf("daemon not serving on %s after %s: %q, %v\n%s", sock, readyTimeout, got, err, d)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	probe := func(class authzClass, op string) string {
		t.Helper()
		got, err := probeAs(class, op)
		if err != nil {
			t.Fatalf("probe %s as %s: %v", op, class.name, err)
		}
		return got
	}
	check := func(class authzClass, row authzRow) {
		t.Helper()
		got := probe(class, row.op)
		t.Logf("%s × %s: %s", row.op, class.name, got)
		allowed := false
		for _, c := range row.allowed {
			allowed = allowed || c == class.name
		}
		switch {
		case allowed && got != "ok":
			t.Errorf("%s × %s: %q, want ok", row.op, class.name, got)
		case !allowed && !strings.HasPrefix(got, "denied: "):
			t.Errorf("%s × %s: %q, want denied", row.op, class.name, got)
		case !allowed:
			// Names the operation, and the class (a guest's refusal) or
			// the uid (a peer the daemon does not admit at all).
			short := strings.TrimPrefix(row.op, "descriptor channel ")
			if !strings.Contains(got, short) && !strings.Contains(strings.ToLower(got), strings.ToLower(short)) {
				t.Errorf("%s × %s: %q does not name the operation", row.op, class.name, got)
			}
			if !strings.Contains(got, "uid "+fmt.Sprint(class.cred.Uid)) {
				t.Errorf("%s × %s: %q does not name the uid", row.op, class.name, got)
			}
			if class.name != "other" && !strings.Contains(got, "("+class.name+")") && !strings.Contains(got, "is "+class.name) {
				t.Errorf("%s × %s: %q does not name the class", row.op, class.name, got)
			}
		}
	}
	root := authzClass{"root", syscall.Credential{Uid: 0, Gid: 0}}
	guests := []authzClass{
		{"allow-uid", syscall.Credential{Uid: authzAllowUID, Gid: authzAllowUID, Groups: []uint32{authzGroup}}},
		{"allow-gid", syscall.Credential{Uid: authzGIDUser, Gid: authzGroup}},
		{"other", syscall.Credential{Uid: authzOther, Gid: authzOther, Groups: []uint32{authzGroup}}},
	}
	all := []string{"owner", "root", "allow-uid", "allow-gid"}
	steer := []string{"owner", "root"}
	rows := []authzRow{
		{"Status", all}, {"Attach", all}, {"descriptor channel LEASE", all},
		{"Stop", steer}, {"Publish", steer}, {"Evict", steer}, {"descriptor channel PUBLISH", steer},
		{"descriptor channel TAKEOVER", []string{"owner"}},
	}
	d := serve()
	// An engine of the owner holds a lease throughout the guests' tries.
	held := exec.Command(helper)
	held.Env = append(h.Env(), "HOME=/", helperEnv+"=authz-hold", helperSocketEnv+"="+sock,
		probeModelEnv+"="+model.Dir, probeOwnerEnv+"="+fmt.Sprint(authzOwner))
	held.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: authzOwner, Gid: authzOwner}}
	holdIn, holdOut := startHold(t, held)
	for _, class := range guests {
		for _, row := range rows {
			check(class, row)
		}
	}
	// Root and the owner: every row; Stop last (it ends the daemon). A
	// takeover request that stops before "imported" changes nothing.
	for _, class := range []authzClass{root, owner} {
		for _, row := range rows {
			if row.op != "Stop" {
				check(class, row)
			}
		}
	}
	if got := probe(owner, "Attach"); got != "ok" {
		t.Fatalf("after every try the daemon does not serve: %q", got)
	}
	holdIn.Close()
	if line, ok := <-holdOut; !ok || line != "lease held" {
		t.Errorf("the owner's lease did not survive the guests' tries: %q", line)
	}
	check(root, authzRow{"Stop", steer})
	if code := h.waitExit(d, 30*time.Second); code != 0 {
		t.Fatalf("root's Stop: the daemon exited %d", code)
	}
	d = serve()
	check(owner, authzRow{"Stop", steer})
	if code := h.waitExit(d, 30*time.Second); code != 0 {
		t.Fatalf("the owner's Stop: the daemon exited %d", code)
	}
}

// runAuthzHold is the test binary as an engine holding a lease on the
// daemon at $helperSocketEnv: it attaches, prints "attached", waits for
// its stdin to close and prints "lease held" if the lease is still open
// then, else "lease ended: ERROR".
func runAuthzHold() int {
	owner, err := strconv.ParseUint(os.Getenv(probeOwnerEnv), 10, 32)
	if err != nil {
		fmt.Fprintln(os.Stderr, "authz-hold: owner:", err)
		return 1
	}
	cfg, err := testproc.EngineConfig(os.Getenv(probeModelEnv), "mock")
	if err != nil {
		fmt.Fprintln(os.Stderr, "authz-hold: config:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	a, err := client.Attach(ctx, client.BySocket(os.Getenv(helperSocketEnv)), cfg,
		client.Options{ClientName: "authz-hold", AllowOwners: []uint32{uint32(owner)}})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "authz-hold: attach:", err)
		return 1
	}
	defer a.Lease.Close()
	fmt.Println("attached")
	_, _ = io.Copy(io.Discard, os.Stdin)
	select {
	case <-a.Lease.Done():
		fmt.Println("lease ended:", a.Lease.Err())
	default:
		fmt.Println("lease held")
	}
	return 0
}

// startHold starts the authz-hold helper cmd and waits for its
// "attached"; it returns its stdin and a channel of its next line.
func startHold(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, <-chan string) {
	t.Helper()
	cmd.Stderr = os.Stderr
	stdin, stdout := childproc.StartPiped(t, cmd)
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "attached" {
		t.Fatalf("authz-hold said %q (%v)", sc.Text(), sc.Err())
	}
	next := make(chan string, 1)
	go func() {
		if sc.Scan() {
			next <- sc.Text()
		}
		close(next)
	}()
	return stdin, next
}
