package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk/names"
)

// writeModelEnv names the checkpoint the fd-write helper attaches to.
const writeModelEnv = "WCACHE_E2E_WRITE_MODEL"

// memfdWriteAttempts tries every route a holder of a lease's memfd
// descriptor has to change the bytes, and returns one line per route:
// "ROUTE: refused (ERR)" or "ROUTE: WROTE".
func memfdWriteAttempts(f *os.File, size uint64) []string {
	var out []string
	report := func(route string, err error) {
		if err != nil {
			out = append(out, fmt.Sprintf("%s: refused (%v)", route, err))
		} else {
			out = append(out, route+": WROTE")
		}
	}
	fd := int(f.Fd())
	_, err := unix.Pwrite(fd, []byte{0xAB}, 0)
	report("pwrite descriptor", err)
	rw, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		report("reopen O_RDWR", err)
		rw = -1
	} else {
		defer unix.Close(rw)
		_, err = unix.Pwrite(rw, []byte{0xAB}, 0)
		report("pwrite reopened O_RDWR", err)
		report("mmap shared writable (reopened)", writeThroughSharedMap(rw, size))
		err = unix.Fallocate(rw, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096)
		report("punch hole (reopened)", err)
		err = unix.Ftruncate(rw, 0)
		report("truncate (reopened)", err)
	}
	report("mmap shared writable", writeThroughSharedMap(fd, size))
	ro, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err == nil {
		err = unix.Mprotect(ro, unix.PROT_READ|unix.PROT_WRITE)
		if err == nil {
			ro[0] ^= 0xFF
		}
		_ = unix.Munmap(ro)
	}
	report("mprotect shared mapping writable", err)
	err = unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096)
	report("punch hole", err)
	return out
}

// writeThroughSharedMap maps size bytes of fd shared and writable and
// flips the first byte; the error is the mapping's.
func writeThroughSharedMap(fd int, size uint64) error {
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	m[0] ^= 0xFF
	_ = unix.Munmap(m)
	return nil
}

// runFDWriteHelper attaches to the daemon at $WCACHE_E2E_SOCKET with the
// checkpoint at $WCACHE_E2E_WRITE_MODEL as any engine would, tries every
// write route on each received memfd (memfdWriteAttempts), then writes to
// its own copy-on-write view (client.MapFile) and prints "private write
// ok" when that write stays visible to it. Exit 0 unless something broke.
func runFDWriteHelper() int {
	dir := os.Getenv(writeModelEnv)
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := mockConfig(dir, ck)
	c, ok := dialHelperDaemon(context.Background(), client.Options{ClientName: "fd-write", AllowOwners: []uint32{0}})
	if !ok {
		return 1
	}
	defer c.Close()
	att, err := c.Attach(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer att.Lease.Close()
	for i, h := range att.Manifest.Handles {
		if h.File == nil {
			fmt.Printf("handle %d: no descriptor\n", i)
			continue
		}
		for _, line := range memfdWriteAttempts(h.File, h.Size) {
			fmt.Printf("handle %d: %s\n", i, line)
		}
		view, err := client.MapFile(h.File, h.Size)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		was := view[0]
		view[0] = ^was
		if view[0] == ^was {
			fmt.Printf("handle %d: private write ok\n", i)
		}
		_ = client.Unmap(view)
	}
	return 0
}

// mockConfig is the config an engine computes for the checkpoint in dir on
// the mock backend (as clientConfig, without a *testing.T).
func mockConfig(dir string, ck *safetensors.Checkpoint) cacheconfig.Config {
	c := cacheconfig.Default()
	c.Model, c.CheckpointDigest, c.DeviceCapability = filepath.Clean(dir), cacheconfig.CheckpointDigest(ck), "mock"
	return c
}

// TestAttacherCannotWriteTheWeights: a client admitted to attach — root,
// and uid 65534 admitted by --allow-gid — holds the lease's memfds and
// tries every route to the bytes (pwrite, reopening /proc/self/fd/N
// O_RDWR, shared writable mappings, mprotect, hole punching, truncation):
// every one is refused, its own writes land in a private copy-on-write
// view, and the daemon's bytes still equal the checkpoint's afterwards.
func TestAttacherCannotWriteTheWeights(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root): the attacker runs as root and as uid 65534")
	}
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 2})
	shared, helper := sharedWithNobody(t, h)
	if err := os.Chmod(model.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for gpu, as := range []struct {
		name string
		cred *syscall.Credential
	}{{"root", nil}, {"uid 65534 (--allow-gid)", &syscall.Credential{Uid: nobody, Gid: nobody}}} {
		t.Run(as.name, func(t *testing.T) {
			d := h.start(serveArgs(gpu, model.Dir, "--max-arena-bytes", "65536",
				"--socket-template", filepath.Join(shared, "{device_uuid}.sock"),
				"--ready-template", filepath.Join(shared, "{device_uuid}.ready"),
				"--socket-group", fmt.Sprint(nobody), "--allow-gid", fmt.Sprint(nobody))...)
			h.waitReady(d, filepath.Join(shared, h.UUIDs[gpu]+".ready"))
			sock := filepath.Join(shared, h.UUIDs[gpu]+".sock")
			cmd := exec.Command(helper)
			cmd.Env = append(os.Environ(), helperEnv+"=fd-write", helperSocketEnv+"="+sock, writeModelEnv+"="+model.Dir)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as.cred}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("fd-write helper: %v\n%s", err, out)
			}
			t.Logf("fd-write helper:\n%s", out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			attempts, private := 0, 0
			for _, l := range lines {
				switch {
				case strings.HasSuffix(l, "WROTE"):
					t.Errorf("an attacher changed the weights: %s", l)
				case strings.Contains(l, "refused"):
					attempts++
				case strings.HasSuffix(l, "private write ok"):
					private++
				}
			}
			if attempts == 0 || private == 0 {
				t.Fatalf("the helper tried nothing (no memfd handles?):\n%s", out)
			}
			att, err := client.Attach(context.Background(), client.BySocket(sock), clientConfig(t, model.Dir), client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer att.Lease.Close()
			if _, err := client.Verify(context.Background(), att.Manifest, safetensorstest.Open(t, model.Dir), client.VerifyOptions{}); err != nil {
				t.Errorf("the daemon's bytes after the attack: %v", err)
			}
		})
	}
}

// TestPublisherWriteAccessEndsAtCommit: a publisher that keeps a writable
// mapping of the plan's memory is refused at the commit (FAILED_PRECONDITION
// naming the mapping; the daemon is empty again); one that unmapped but
// kept its writable descriptor can neither write through it nor map it
// writable after the commit, and attachers see the committed bytes.
func TestPublisherWriteAccessEndsAtCommit(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	h.startEmpty(0)
	sock := h.Paths(h.UUIDs[0]).Socket
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.BySocket(sock), client.Options{ClientName: "publisher"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fill := func(plan *client.PublishPlan, keep bool) ([]*os.File, error) {
		var kept []*os.File
		for i, hd := range plan.Handles {
			if hd.Kind != names.KindMemfd || hd.File == nil {
				return nil, fmt.Errorf("plan handle %d is %q without a descriptor", i, hd.Kind)
			}
			m, err := unix.Mmap(int(hd.File.Fd()), 0, int(hd.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				return nil, err
			}
			for j := range m {
				m[j] = byte(j)
			}
			if !keep {
				if err := unix.Munmap(m); err != nil {
					return nil, err
				}
			}
			f, err := dupFile(hd.File)
			if err != nil {
				return nil, err
			}
			kept = append(kept, f)
		}
		return kept, nil
	}

	var kept []*os.File
	_, err = c.Publish(ctx, helperPublication(), func(ctx context.Context, p *client.PublishPlan) ([][]byte, error) {
		var err error
		kept, err = fill(p, true)
		return nil, err
	})
	for _, f := range kept {
		f.Close()
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("commit with a writable mapping kept: %v, want FAILED_PRECONDITION naming the writable mapping", err)
	}
	h.waitState(h.UUIDs[0], "empty")

	res, err := c.Publish(ctx, helperPublication(), func(ctx context.Context, p *client.PublishPlan) ([][]byte, error) {
		var err error
		kept, err = fill(p, false)
		return nil, err
	})
	if err != nil {
		t.Fatalf("publish that unmapped before the commit: %v", err)
	}
	defer func() {
		for _, f := range kept {
			f.Close()
		}
	}()
	for i, f := range kept {
		if _, err := unix.Pwrite(int(f.Fd()), []byte{0xEE}, 0); err == nil {
			t.Errorf("handle %d: the publisher wrote through its descriptor after the commit", i)
		}
		if m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
			_ = unix.Munmap(m)
			t.Errorf("handle %d: the publisher mapped the memory writable after the commit", i)
		}
	}
	cfg := helperPublication().Config
	cfg.DeviceCapability = "mock"
	att, err := c.Attach(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Lease.Close()
	if att.Manifest.Generation != res.Generation {
		t.Fatalf("attached generation %d, published %d", att.Manifest.Generation, res.Generation)
	}
	for _, tn := range att.Manifest.Tensors {
		hd := att.Manifest.Handles[tn.Handle]
		data, err := client.MapFile(hd.File, hd.Size)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, tn.Length)
		for j := range want {
			want[j] = byte(tn.Offset + uint64(j))
		}
		if !bytes.Equal(data[tn.Offset:tn.Offset+tn.Length], want) {
			t.Errorf("tensor %s: the bytes changed after the commit", tn.Name)
		}
		_ = client.Unmap(data)
	}
}

// dupFile duplicates f's descriptor (the same open file description).
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
