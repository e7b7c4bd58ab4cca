package cli

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
)

// maxDigestRanges bounds the ranges of one Digest call so that a request
// stays small whatever the tensor count.
const maxDigestRanges = 1024

// attachSummary is what `wcache attach` prints (and its JSON form).
type attachSummary struct {
	DeviceUUID       string          `json:"device_uuid"`
	Socket           string          `json:"socket"`
	Backend          string          `json:"backend"`
	ConfigDigest     string          `json:"config_digest"`
	CheckpointDigest string          `json:"checkpoint_digest"`
	LeaseID          uint64          `json:"lease_id"`
	Generation       uint64          `json:"generation"`
	Tensors          int             `json:"tensors"`
	Bytes            uint64          `json:"bytes"`
	Handles          []attachHandle  `json:"handles"`
	TimingsMS        attachTimingsMS `json:"timings_ms"`
	Verified         bool            `json:"verified"`
}

type attachHandle struct {
	Kind string `json:"kind"`
	Size uint64 `json:"size"`
	// Data is the kind-specific handle (base64 in JSON): a file path for
	// posix-shm, a cudaIpcMemHandle for cuda-ipc.
	Data []byte `json:"data"`
}

type attachTimingsMS struct {
	Dial   float64 `json:"dial"`
	Attach float64 `json:"attach"`
	Verify float64 `json:"verify,omitempty"`
}

func newAttachCommand(e *env) *cobra.Command {
	var (
		socket         string
		uuid           string
		gpu            int
		model          string
		shardPattern   string
		jsonOut        bool
		verify         bool
		hold           time.Duration
		clientName     string
		releaseOnDrain bool
		allowOwners    []uint
	)
	cmd := &cobra.Command{
		Use:   "attach (--socket PATH | --device-uuid UUID | --backend NAME --gpu-id N) --model DIR",
		Short: "Attach to a daemon as an engine would, and report what it holds",
		Long: `Attach finds a daemon (an explicit socket, a device UUID, or the UUID of the
GPU a backend sees as --gpu-id), sends the CacheConfig built from the flags and
the checkpoint's header digest, and prints what came back. --verify imports
every handle through the backend and compares each tensor's SHA-256 with the
bytes on disk. --hold keeps the lease open (releasing it early when the daemon
drains, unless --release-on-drain=false).

Exit codes: 3 no daemon, or an empty one (the only cases in which an engine
may load from disk instead),
4 incompatible config (every differing field is listed), 1 anything else.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	bf := addBackendFlags(fs)
	cf := addConfigFlags(fs)
	lf := addLayoutFlags(fs)
	fs.StringVar(&socket, "socket", "", "attach to the daemon at this socket path")
	fs.StringVar(&uuid, "device-uuid", "", "attach to the daemon of this device UUID")
	fs.IntVar(&gpu, "gpu-id", -1, "GPU ordinal as this process sees it (with --backend)")
	fs.StringVar(&model, "model", "", "checkpoint directory the weights must come from")
	fs.StringVar(&shardPattern, "shard-pattern", "", "pre-sharded per-rank files inside --model")
	fs.BoolVar(&jsonOut, "json", false, "print the summary as JSON")
	fs.BoolVar(&verify, "verify", false, "read every tensor back through the backend and compare it with the file")
	fs.DurationVar(&hold, "hold", 0, "keep the lease open this long before releasing it")
	fs.StringVar(&clientName, "client-name", "wcache-attach", "name shown by wcache status")
	fs.BoolVar(&releaseOnDrain, "release-on-drain", true, "with --hold, release as soon as the daemon drains")
	fs.UintSliceVar(&allowOwners, "allow-owner", nil,
		"also trust a socket owned by this uid (a daemon run by a service account; repeatable)")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		layout, err := lf.layout()
		if err != nil {
			return err
		}
		cfg, err := cf.config()
		if err != nil {
			return err
		}
		if model == "" {
			return usageErrorf("--model is required: the checkpoint digest names the weights")
		}
		if socket != "" && uuid != "" {
			return usageErrorf("--socket and --device-uuid exclude each other")
		}
		// The backend finds the daemon when no socket or UUID is given, and
		// imports the handles for --verify.
		useBackend := socket == "" && uuid == "" || verify
		if useBackend && gpu < 0 {
			return usageErrorf("--gpu-id is required to find the daemon through --backend, and for --verify")
		}

		ck, err := openCheckpointFiles(model, shardPattern, cfg)
		if err != nil {
			return err
		}
		cfg.Model = filepath.Clean(model)
		cfg.CheckpointDigest = cacheconfig.CheckpointDigest(ck)

		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		var backend sdk.Backend
		if useBackend {
			plugin, err := bf.start(ctx, e)
			if err != nil {
				return err
			}
			defer plugin.Close()
			backend = plugin.Backend()
		}
		var target client.Target
		switch {
		case socket != "":
			target = client.BySocket(socket)
		case uuid != "":
			target = client.ByDeviceUUID(layout, uuid)
		default:
			target = client.ByOrdinal(layout, backend, gpu)
		}

		begin := time.Now()
		copts := client.Options{ClientName: clientName}
		for _, u := range allowOwners {
			copts.AllowOwners = append(copts.AllowOwners, uint32(u))
		}
		c, err := client.Dial(ctx, target, copts)
		if err != nil {
			return attachExit(err)
		}
		defer c.Close()
		dialed := time.Now()
		if cfg.DeviceCapability == "" {
			if cfg.DeviceCapability, err = deviceCapability(ctx, backend, gpu, c); err != nil {
				return err
			}
		}
		a, err := c.Attach(ctx, cfg)
		if err != nil {
			return attachExit(err)
		}
		defer a.Lease.Close()
		attached := time.Now()
		m := a.Manifest
		sum := attachSummary{DeviceUUID: m.DeviceUUID, Socket: c.Socket(), Backend: m.Backend,
			ConfigDigest: m.ConfigDigest, CheckpointDigest: cfg.CheckpointDigest, LeaseID: m.LeaseID,
			Generation: m.Generation, Tensors: len(m.Tensors), Bytes: m.Bytes(), Handles: []attachHandle{},
			TimingsMS: attachTimingsMS{Dial: ms(dialed.Sub(begin)), Attach: ms(attached.Sub(dialed))}}
		for _, h := range m.Handles {
			sum.Handles = append(sum.Handles, attachHandle{Kind: h.Kind, Size: h.Size, Data: h.Data})
		}
		if verify {
			if err := verifyManifest(ctx, backend, gpu, m, ck); err != nil {
				return err
			}
			sum.Verified = true
			sum.TimingsMS.Verify = ms(time.Since(attached))
		}
		if err := printAttach(e.stdout, sum, jsonOut); err != nil {
			return err
		}
		if hold > 0 {
			return holdLease(ctx, e.stdout, a.Lease, hold, releaseOnDrain)
		}
		return nil
	}
	return cmd
}

// openCheckpointFiles opens the checkpoint a config names: the whole
// directory, or the rank's pre-sharded files.
func openCheckpointFiles(model, shardPattern string, cfg cacheconfig.Config) (*safetensors.Checkpoint, error) {
	if shardPattern == "" {
		ck, err := safetensors.OpenCheckpoint(model)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", model, err)
		}
		return ck, nil
	}
	files, err := plan.ShardFiles(model, shardPattern, plan.ShardRanks{TPRank: cfg.TPRank, TPSize: cfg.TPSize,
		PPRank: cfg.PPRank, PPSize: cfg.PPSize})
	if err != nil {
		if errors.Is(err, plan.ErrInvalidPattern) {
			return nil, withCode(ExitUsage, err)
		}
		return nil, err
	}
	ck, err := safetensors.OpenFiles(files)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", model, err)
	}
	return ck, nil
}

// deviceCapability is the capability the client side expects: the
// backend's for the GPU when there is a backend, else what the daemon
// reports (this command is a diagnostic; an engine sets its own).
func deviceCapability(ctx context.Context, b sdk.Backend, gpu int, c *client.Client) (string, error) {
	if b != nil {
		devs, err := b.Devices(ctx)
		if err != nil {
			return "", fmt.Errorf("device capability: %w", err)
		}
		for _, d := range devs {
			if d.Ordinal == gpu {
				return d.Capability, nil
			}
		}
		return "", fmt.Errorf("device capability: the backend lists no GPU %d", gpu)
	}
	st, err := c.Status(ctx)
	if err != nil {
		return "", attachExit(err)
	}
	return st.Config.DeviceCapability, nil
}

// attachExit maps discovery and attach errors to exit codes.
func attachExit(err error) error {
	switch {
	case errors.Is(err, client.ErrNoDaemon), errors.Is(err, client.ErrEmpty):
		return withCode(ExitNoDaemon, err)
	case errors.Is(err, cacheconfig.ErrMismatch):
		return withCode(ExitIncompatible, err)
	}
	return err
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printAttach writes the summary.
func printAttach(w io.Writer, s attachSummary, jsonOut bool) error {
	if jsonOut {
		return json.NewEncoder(w).Encode(s)
	}
	fmt.Fprintf(w, "attached to %s via %s (backend %s, lease %d)\n", s.DeviceUUID, s.Socket, s.Backend, s.LeaseID)
	fmt.Fprintf(w, "  config digest      %s\n", s.ConfigDigest)
	fmt.Fprintf(w, "  checkpoint digest  %s\n", s.CheckpointDigest)
	fmt.Fprintf(w, "  tensors            %d (%s) in %d handle(s):", s.Tensors, humanBytes(s.Bytes), len(s.Handles))
	for _, h := range s.Handles {
		fmt.Fprintf(w, " %s %s", h.Kind, humanBytes(h.Size))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  timings            dial %.2f ms, attach %.2f ms", s.TimingsMS.Dial, s.TimingsMS.Attach)
	if s.Verified {
		fmt.Fprintf(w, ", verify %.2f ms", s.TimingsMS.Verify)
	}
	fmt.Fprintln(w)
	if s.Verified {
		fmt.Fprintf(w, "  verify             all %d tensors match the files\n", s.Tensors)
	}
	return nil
}

// holdLease keeps the lease open for d, printing notices; it returns early
// on a signal, when the lease ends (an error), or on a drain notice when
// releaseOnDrain.
func holdLease(ctx context.Context, w io.Writer, l *client.Lease, d time.Duration, releaseOnDrain bool) error {
	fmt.Fprintf(w, "holding lease %d for %s\n", l.ID(), d)
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-l.Done():
			return fmt.Errorf("lease ended while held: %w", l.Err())
		case n := <-l.Notices():
			fmt.Fprintf(w, "notice: draining: %s (deadline %s)\n", n.Message, n.Deadline.Format(time.RFC3339))
			if n.Kind == client.NoticeDraining && releaseOnDrain {
				fmt.Fprintf(w, "releasing lease %d\n", l.ID())
				return nil
			}
		}
	}
}

// verifyManifest imports every handle through b and compares each tensor's
// SHA-256 with the bytes of the checkpoint's file. The first difference is
// an error naming the tensor.
func verifyManifest(ctx context.Context, b sdk.Backend, gpu int, m *client.Manifest, ck *safetensors.Checkpoint) error {
	type source struct {
		f *safetensors.File
		t safetensors.TensorInfo
	}
	files := make(map[string]source, ck.NumTensors())
	for _, f := range ck.Files {
		for _, t := range f.Header.Tensors {
			files[t.Name] = source{f, t}
		}
	}
	if len(m.Tensors) != len(files) {
		return fmt.Errorf("verify: the daemon holds %d tensors, the checkpoint has %d", len(m.Tensors), len(files))
	}
	byHandle := make([][]int, len(m.Handles))
	for i, t := range m.Tensors {
		src, ok := files[t.Name]
		if !ok {
			return fmt.Errorf("verify: tensor %q is not in the checkpoint", t.Name)
		}
		if t.Length != src.t.Len() || t.DType != string(src.t.DType) || fmt.Sprint(t.Shape) != fmt.Sprint(src.t.Shape) {
			return fmt.Errorf("verify: tensor %q is %s %v (%d bytes) in the daemon, %s %v (%d bytes) in %s",
				t.Name, t.DType, t.Shape, t.Length, src.t.DType, src.t.Shape, src.t.Len(), src.f.Path)
		}
		byHandle[t.Handle] = append(byHandle[t.Handle], i)
	}
	buf := make([]byte, 1<<20)
	for hi, h := range m.Handles {
		id, err := b.Import(ctx, gpu, sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size})
		if err != nil {
			return fmt.Errorf("verify: import handle %d (%s): %w", hi, h.Kind, err)
		}
		err = verifyHandle(ctx, b, id, m, byHandle[hi], func(name string) ([32]byte, error) {
			src := files[name]
			return fileSHA256(src.f, src.t, buf)
		})
		if ferr := b.Free(ctx, id); ferr != nil && err == nil {
			err = fmt.Errorf("verify: release imported handle %d: %w", hi, ferr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// verifyHandle digests the tensors idx of one imported handle in batches and
// compares them with want.
func verifyHandle(ctx context.Context, b sdk.Backend, id sdk.AllocationID, m *client.Manifest, idx []int,
	want func(name string) ([32]byte, error)) error {
	for start := 0; start < len(idx); start += maxDigestRanges {
		batch := idx[start:min(start+maxDigestRanges, len(idx))]
		ranges := make([]sdk.Range, len(batch))
		for i, ti := range batch {
			ranges[i] = sdk.Range{Offset: m.Tensors[ti].Offset, Length: m.Tensors[ti].Length}
		}
		got, err := b.Digest(ctx, id, ranges)
		if err != nil {
			return fmt.Errorf("verify: digest: %w", err)
		}
		if len(got) != len(batch) {
			return fmt.Errorf("verify: the backend returned %d digests for %d ranges", len(got), len(batch))
		}
		for i, ti := range batch {
			name := m.Tensors[ti].Name
			w, err := want(name)
			if err != nil {
				return err
			}
			if got[i] != w {
				return fmt.Errorf("verify: tensor %q differs from the file: device sha256 %x, file sha256 %x", name, got[i], w)
			}
		}
	}
	return nil
}

// fileSHA256 hashes a tensor's bytes in its file.
func fileSHA256(f *safetensors.File, t safetensors.TensorInfo, buf []byte) ([32]byte, error) {
	fh, err := os.Open(f.Path)
	if err != nil {
		return [32]byte{}, fmt.Errorf("verify: %w", err)
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(fh, f.Offset(t), int64(t.Len())), buf); err != nil {
		return [32]byte{}, fmt.Errorf("verify: read %s: %w", f.Path, err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
