package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonctl"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/internal/procstat"
)

// daemonStatus is one row of `wcache status` (and its JSON form).
type daemonStatus struct {
	DeviceUUID string `json:"device_uuid"`
	GPU        int    `json:"gpu"`
	TPRank     uint32 `json:"tp_rank"`
	TPSize     uint32 `json:"tp_size"`
	PPRank     uint32 `json:"pp_rank"`
	PPSize     uint32 `json:"pp_size"`
	ReadyFile  string `json:"ready_file"`
	Socket     string `json:"socket"`
	PID        int    `json:"pid"`
	// Process is daemonfile's verdict on the pid: alive, dead, zombie, reused.
	Process string `json:"process"`
	Alive   bool   `json:"alive"`
	// State is "empty", "publishing", "serving", "draining" or "stopping"
	// for a live daemon, "stale" when the process is gone, "unreachable"
	// when it runs but does not answer.
	State         string        `json:"state"`
	Backend       string        `json:"backend"`
	Model         string        `json:"model"`
	ConfigDigest  string        `json:"config_digest"`
	Bytes         uint64        `json:"bytes"`
	Tensors       int           `json:"tensors"`
	Leases        []statusLease `json:"leases"`
	UptimeSeconds float64       `json:"uptime_seconds"`
	Version       string        `json:"version"`
	// PublisherPID is the publishing client while State is "publishing".
	PublisherPID int32 `json:"publisher_pid,omitempty"`
	// Source is how the weights came ("files", "takeover"; "" empty or
	// published); BytesLoaded what was read from files; PluginRestarts the
	// backend plugins replaced under descriptor handles.
	Source         string `json:"source,omitempty"`
	BytesLoaded    uint64 `json:"bytes_loaded"`
	PluginRestarts int    `json:"plugin_restarts,omitempty"`
	// DeviceBytes is the device memory the served generation holds (its
	// arenas' sizes), DeviceBytesTotal all the daemon holds (a publish in
	// progress included); MaxBytes its --max-bytes (0: none).
	DeviceBytes      uint64 `json:"device_bytes"`
	DeviceBytesTotal uint64 `json:"device_bytes_total"`
	MaxBytes         uint64 `json:"max_bytes,omitempty"`
	// FilledFrom is where the first generation's bytes came from ("files",
	// "peer GPU-…", "peer HOST:PORT"); FillFallback why a peer fill was
	// tried and not used (docs/peer-fill.md).
	FilledFrom   string `json:"filled_from,omitempty"`
	FillFallback string `json:"fill_fallback,omitempty"`
	// Generations are every generation the daemon holds (a target and a
	// draft model, several models), oldest first; the fields above
	// describe the first serving one.
	Generations []statusGeneration `json:"generations"`
	Error       string             `json:"error,omitempty"`
}

// statusGeneration is one generation of a daemon.
type statusGeneration struct {
	Generation   uint64        `json:"generation"`
	State        string        `json:"state"`
	Model        string        `json:"model"`
	ConfigDigest string        `json:"config_digest"`
	Bytes        uint64        `json:"bytes"`
	DeviceBytes  uint64        `json:"device_bytes"`
	Tensors      int           `json:"tensors"`
	Source       string        `json:"source,omitempty"`
	FilledFrom   string        `json:"filled_from,omitempty"`
	FillFallback string        `json:"fill_fallback,omitempty"`
	Leases       []statusLease `json:"leases"`
}

type statusLease struct {
	ID         uint64 `json:"id"`
	PID        int32  `json:"pid"`
	UID        uint32 `json:"uid"`
	ClientName string `json:"client_name"`
	SinceMS    int64  `json:"since_unix_ms"`
}

func newStatusCommand(e *env) *cobra.Command {
	var jsonOut, check bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List this user's daemons: device, process, what they hold, who is attached",
		Long: `List every daemon of this user, found through the ready files of the path
layout. A live daemon is asked over its socket (Status RPC); a ready file
whose process is gone is reported as stale (remove it with wcache cleanup).
The table is followed by the wcache serve processes of other users (from
/proc), which this user's layout does not reach, and how such a daemon is
shared (serve --socket-group, --allow-uid). --json prints this user's daemons only.

--check is the contract for probes (a Kubernetes readiness probe, a
systemd ExecStartPost, a script): it prints one line and exits 0 when at
least one daemon of this user is found and every one of them is serving,
empty (waiting for a publish) or publishing; it exits 3 when none is found
and 1 when any is stale, unreachable, unreadable, draining or stopping. The
line names the daemons that hold the check back. Other users' daemons, peer
fills and several generations per daemon do not change the verdict.`,
		Args: cobra.NoArgs,
	}
	lf := addLayoutFlags(cmd.Flags())
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print a JSON array")
	cmd.Flags().BoolVar(&check, "check", false, "print one verdict line; exit 0 when every daemon is ready, 1 when one is not, 3 when there is none (for probes)")
	cmd.MarkFlagsMutuallyExclusive("json", "check")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		layout, err := lf.layout()
		if err != nil {
			return err
		}
		found, err := daemonctl.Find(layout)
		if err != nil {
			return err
		}
		rows := make([]daemonStatus, len(found))
		for i, f := range found {
			rows[i] = statusRow(daemonctl.Inspect(cmd.Context(), f))
		}
		if check {
			return checkStatus(e.stdout, rows)
		}
		if jsonOut {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rows)
		}
		if err := printStatus(e.stdout, rows); err != nil {
			return err
		}
		return printForeign(e.stdout, daemonfile.ForeignDaemons(uint32(os.Geteuid())))
	}
	return cmd
}

// statusRow is the row of `wcache status` for what daemonctl.Inspect
// reported.
func statusRow(rep daemonctl.Report) daemonStatus {
	f := rep.Found
	row := daemonStatus{DeviceUUID: f.UUID, ReadyFile: f.Paths.Ready, Socket: f.Paths.Socket, Leases: []statusLease{},
		Generations: []statusGeneration{}}
	row.State = rep.State
	if rep.Err != nil {
		row.Error = rep.Err.Error()
	}
	if rep.State == daemonctl.StateUnreadable {
		return row
	}
	r := rep.Ready
	row.GPU = r.GPU
	row.PID, row.Backend, row.Model, row.ConfigDigest, row.Version = r.PID, r.Backend, r.Model, r.ConfigDigest, r.Version
	row.Process = daemonctl.ProcessName(rep.Process)
	row.Alive = rep.Process == procstat.Alive
	st := rep.Status
	if st == nil {
		return row
	}
	row.Bytes, row.Tensors = st.Bytes, st.Tensors
	row.Backend, row.Model, row.ConfigDigest, row.Version = st.Backend, st.Model, st.ConfigDigest, st.Version
	if row.Model == "" && st.ConfigDigest != "" {
		row.Model = st.Config.Model + " (published)"
	}
	row.PublisherPID = st.PublisherPID
	row.Source, row.BytesLoaded, row.PluginRestarts = st.StartPhases.Source, st.StartPhases.BytesLoaded, st.StartPhases.PluginRestarts
	row.DeviceBytes, row.DeviceBytesTotal, row.MaxBytes = st.DeviceBytes, st.DeviceBytesTotal, st.MaxBytes
	row.FilledFrom, row.FillFallback = st.FilledFrom, st.FillFallback
	row.TPRank, row.TPSize, row.PPRank, row.PPSize = st.Config.TPRank, st.Config.TPSize, st.Config.PPRank, st.Config.PPSize
	row.UptimeSeconds = time.Since(st.Started).Seconds()
	for _, l := range st.Leases {
		row.Leases = append(row.Leases, leaseRow(l))
	}
	for _, g := range st.Generations {
		gr := statusGeneration{Generation: g.Generation, State: g.State, Model: g.Model, ConfigDigest: g.ConfigDigest,
			Bytes: g.Bytes, DeviceBytes: g.DeviceBytes, Tensors: g.Tensors, Source: g.Source,
			FilledFrom: g.FilledFrom, FillFallback: g.FillFallback, Leases: []statusLease{}}
		if gr.Model == "" {
			gr.Model = g.Config.Model + " (published)"
		}
		for _, l := range g.Leases {
			gr.Leases = append(gr.Leases, leaseRow(l))
		}
		row.Generations = append(row.Generations, gr)
	}
	return row
}

// leaseRow is one lease of the status output.
func leaseRow(l client.LeaseInfo) statusLease {
	return statusLease{ID: l.ID, PID: l.PID, UID: l.UID, ClientName: l.ClientName, SinceMS: l.Since.UnixMilli()}
}

// leasesCell is "-", or the count and pids of leases.
func leasesCell(ls []statusLease) string {
	if len(ls) == 0 {
		return "-"
	}
	pids := make([]string, len(ls))
	for i, l := range ls {
		pids[i] = fmt.Sprint(l.PID)
	}
	return fmt.Sprintf("%d (pid %s)", len(ls), strings.Join(pids, ","))
}

// printForeign lists the daemons of other users (which this user's
// layout does not find) and says how one is shared.
func printForeign(w io.Writer, others []daemonfile.ForeignDaemon) error {
	if len(others) == 0 {
		return nil
	}
	uid := uint32(os.Geteuid())
	fmt.Fprintf(w, "\ndaemons of other users (not shared with uid %d unless set up for it):\n", uid)
	for _, o := range others {
		fmt.Fprintf(w, "  pid %d, uid %d: %s\n", o.PID, o.UID, o.Command())
	}
	_, err := fmt.Fprintf(w, "%s.\n", daemonfile.ShareHint(uid))
	return err
}

// printStatus renders rows as a table.
func printStatus(w io.Writer, rows []daemonStatus) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no wcache daemons")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tDEVICE\tTP\tPP\tPID\tSTATE\tBACKEND\tTENSORS\tBYTES\tLEASES\tUPTIME\tMODEL")
	for _, r := range rows {
		state := r.State
		switch {
		case r.State == "stale":
			state = "stale (" + r.Process + ")"
		case r.PublisherPID != 0:
			state = fmt.Sprintf("publishing (pid %d)", r.PublisherPID)
		}
		leases := leasesCell(r.Leases)
		uptime := "-"
		if r.UptimeSeconds > 0 {
			uptime = (time.Duration(r.UptimeSeconds) * time.Second).String()
		}
		tp, pp := "-", "-"
		if r.TPSize > 0 {
			tp, pp = fmt.Sprintf("%d/%d", r.TPRank, r.TPSize), fmt.Sprintf("%d/%d", r.PPRank, r.PPSize)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.GPU, r.DeviceUUID, tp, pp, r.PID, state, r.Backend, r.Tensors,
			humanBytes(r.Bytes), leases, uptime, r.Model)
		if r.Error != "" {
			fmt.Fprintf(tw, "\terror: %s\n", r.Error)
		}
		if line := fillLine(r.FilledFrom, r.FillFallback); line != "" {
			fmt.Fprintf(tw, "\t%s\n", line)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printGenerations(w, rows)
}

// printGenerations lists the generations of the daemons that hold more
// than one, each with its state, bytes on the device and leases, and the
// daemon's total.
func printGenerations(w io.Writer, rows []daemonStatus) error {
	for _, r := range rows {
		if len(r.Generations) < 2 {
			continue
		}
		fmt.Fprintf(w, "\nGPU %d (%s): %d generations, %s on the device\n", r.GPU, r.DeviceUUID, len(r.Generations),
			humanBytes(r.DeviceBytesTotal))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  GENERATION\tSTATE\tTENSORS\tBYTES\tDEVICE BYTES\tLEASES\tCONFIG\tMODEL")
		for _, g := range r.Generations {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", g.Generation, g.State, g.Tensors, humanBytes(g.Bytes),
				humanBytes(g.DeviceBytes), leasesCell(g.Leases), shortDigest(g.ConfigDigest), g.Model)
			if line := fillLine(g.FilledFrom, g.FillFallback); line != "" {
				fmt.Fprintf(tw, "  \t%s\n", line)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// fillLine says where weights were filled from when a peer was involved:
// "filled from peer GPU-…", or "filled from files (peer fill fell back:
// REASON)"; "" for a plain file load, a takeover or a publish.
func fillLine(from, fallback string) string {
	switch {
	case fallback != "":
		return fmt.Sprintf("filled from %s (peer fill fell back: %s)", from, fallback)
	case strings.HasPrefix(from, "peer "):
		return "filled from " + from
	}
	return ""
}

// shortDigest is "sha256:" and the first 12 hex digits of d.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// errNoDaemons: a command that acts on daemons found none.
var errNoDaemons = errors.New("no wcache daemon found")
