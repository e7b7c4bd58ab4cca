package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/internal/poll"
)

// A daemon that runs out of descriptors for a moment (EMFILE on accept)
// serves descriptor handles again once leases are released: its
// descriptor channel must not stop accepting for good. Leases are opened
// until the daemon, confined to a few spare descriptors with prlimit,
// refuses one; after every lease is released a new attach, which fetches
// its memfds on the channel, must succeed.
func TestDescriptorChannelSurvivesRunningOutOfDescriptors(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) not installed: cannot confine the daemon's descriptors")
	}
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	d := h.startServe(0, model.Dir)
	fds := func() int {
		es, err := os.ReadDir("/proc/" + strconv.Itoa(d.PID()) + "/fd")
		if err != nil {
			t.Fatalf("read the daemon's descriptors: %v", err)
		}
		return len(es)
	}
	base := fds()
	limit := strconv.Itoa(base + 12)
	if out, err := exec.Command(prlimit, "--pid", strconv.Itoa(d.PID()), "--nofile="+limit+":"+limit).CombinedOutput(); err != nil {
		t.Skipf("prlimit --pid %d: %v: %s", d.PID(), err, out)
	}
	cfg := clientConfig(t, model.Dir)
	var held []*client.Attachment
	refused := false
	for i := 0; i < 40 && !refused; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a, err := client.Attach(ctx, client.BySocket(h.Paths(h.UUIDs[0]).Socket), cfg, client.Options{ClientName: "fd-limit"})
		cancel()
		if err != nil {
			t.Logf("attach %d refused with %d daemon descriptors (limit %s): %v", i+1, fds(), limit, err)
			refused = true
			break
		}
		held = append(held, a)
	}
	if !refused {
		t.Fatalf("%d leases held within a limit of %s descriptors: the limit did not bite", len(held), limit)
	}
	// The refusal above came where the daemon had two descriptors left (one
	// for the gRPC connection, one for the channel's, none for the dup). One
	// idle connection more takes one of them, so that the next attach's
	// channel connection finds none at accept.
	idle, err := net.Dial("unix", h.Paths(h.UUIDs[0]).Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if a, err := client.Attach(ctx, client.BySocket(h.Paths(h.UUIDs[0]).Socket), cfg, client.Options{ClientName: "fd-limit-emfile"}); err == nil {
		held = append(held, a)
	} else {
		t.Logf("attach with no descriptor left for the channel: %v", err)
	}
	cancel()
	_ = idle.Close()
	for _, a := range held {
		_ = a.Lease.Close()
	}
	poll.Until(context.Background(), 10*time.Second, func() bool { return fds() <= base+4 })
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := client.Attach(ctx, client.BySocket(h.Paths(h.UUIDs[0]).Socket), cfg, client.Options{ClientName: "fd-limit-after"})
	if err != nil {
		t.Fatalf("attach after the leases were released (%d daemon descriptors): %v", fds(), err)
	}
	defer a.Lease.Close()
	checkBytes(t, a.Manifest, model, 0)
}
