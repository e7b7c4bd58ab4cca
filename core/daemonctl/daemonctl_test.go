package daemonctl

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/daemontest/testworld"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/procstat"
)

const (
	uuidStale  = "GPU-00000000-0000-0000-0000-00000000000a"
	uuidLocked = "GPU-00000000-0000-0000-0000-00000000000b"
	uuidSilent = "GPU-00000000-0000-0000-0000-00000000000c"
)

// fixture is a layout in a fresh folder holding: a ready file whose
// process is gone (this process's pid with another start time), a device
// that left only its lock file, and a ready file of this very process,
// which runs but listens on no socket.
func fixture(t *testing.T) (paths.Layout, map[string]paths.Paths) {
	t.Helper()
	_, layout := testworld.Folder(t)
	ps := map[string]paths.Paths{}
	var err error
	for _, u := range []string{uuidStale, uuidLocked, uuidSilent} {
		if ps[u], err = layout.For(u); err != nil {
			t.Fatal(err)
		}
	}
	start, err := procstat.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for u, st := range map[string]uint64{uuidStale: start + 1, uuidSilent: start} {
		r := daemonfile.Ready{PID: os.Getpid(), StartTime: st, DeviceUUID: u, GPU: 3, Socket: ps[u].Socket, Backend: "mock"}
		if err := daemonfile.WriteReady(ps[u].Ready, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(ps[uuidLocked].Lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return layout, ps
}

func uuids(fs []Found) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.UUID)
	}
	return strings.Join(out, " ")
}

func TestFindListsReadyFilesAndLockLeftovers(t *testing.T) {
	layout, ps := fixture(t)
	found, err := Find(layout)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := uuids(found), uuidStale+" "+uuidSilent; got != want {
		t.Fatalf("Find = %s, want %s", got, want)
	}
	if found[0].Paths != ps[uuidStale] {
		t.Fatalf("Find paths %+v, want %+v", found[0].Paths, ps[uuidStale])
	}
	all, err := FindWithLocks(layout)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := uuids(all), uuidStale+" "+uuidSilent+" "+uuidLocked; got != want {
		t.Fatalf("FindWithLocks = %s, want %s", got, want)
	}
}

func TestInspectReportsStaleUnreachableAndUnreadable(t *testing.T) {
	_, ps := fixture(t)
	ctx := context.Background()

	rep := Inspect(ctx, Found{UUID: uuidStale, Paths: ps[uuidStale]})
	if rep.State != StateStale || rep.Process != procstat.Reused || rep.Ready.GPU != 3 || rep.Status != nil || rep.Err != nil {
		t.Fatalf("stale daemon: %+v", rep)
	}
	rep = Inspect(ctx, Found{UUID: uuidSilent, Paths: ps[uuidSilent]})
	if rep.State != StateUnreachable || rep.Process != procstat.Alive || !errors.Is(rep.Err, client.ErrNoDaemon) {
		t.Fatalf("running process without a socket: %+v", rep)
	}
	rep = Inspect(ctx, Found{UUID: uuidLocked, Paths: ps[uuidLocked]})
	if rep.State != StateUnreadable || rep.Err == nil {
		t.Fatalf("no ready file: %+v", rep)
	}
}

func TestStopRefusesDevicesWithoutARunningDaemon(t *testing.T) {
	_, ps := fixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		uuid, want string
	}{
		{uuidLocked, "device " + uuidLocked + ": no daemon (no ready file " + ps[uuidLocked].Ready + ")"},
		{uuidStale, "the daemon (pid " + itoa(os.Getpid()) + ") is gone (reused) and left stale files; run `wcache cleanup --device-uuid " + uuidStale + "`"},
	} {
		_, err := Stop(ctx, ps[tc.uuid], false, 0)
		var ge *GoneError
		if !errors.As(err, &ge) || !errors.Is(err, client.ErrNoDaemon) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Stop %s = %v, want a *GoneError matching client.ErrNoDaemon and saying %q", tc.uuid, err, tc.want)
		}
	}
	// A running process without a socket: the dial's error, named.
	if _, err := Stop(ctx, ps[uuidSilent], false, 0); !errors.Is(err, client.ErrNoDaemon) {
		t.Errorf("Stop of a silent process = %v, want client.ErrNoDaemon", err)
	}
}

func TestWaitExitGivesUpOnALiveProcess(t *testing.T) {
	start, err := procstat.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	err = WaitExit(context.Background(), os.Getpid(), start, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("WaitExit on this process = %v, want still running", err)
	}
	if err := WaitExit(context.Background(), os.Getpid(), start+1, time.Second); err != nil {
		t.Fatalf("WaitExit on a reused pid = %v, want nil", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestProcessName: the spellings wcache status shows.
func TestProcessName(t *testing.T) {
	for s, want := range map[procstat.State]string{
		procstat.Alive: "alive", procstat.Dead: "dead", procstat.Zombie: "zombie", procstat.Reused: "reused",
	} {
		if got := ProcessName(s); got != want {
			t.Errorf("ProcessName(%d) = %q, want %q", s, got, want)
		}
	}
}
