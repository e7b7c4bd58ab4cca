package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fdpass"
)

// ErrNoTakeover: serve --takeover found a daemon whose memory cannot be
// taken over (its handles are names, not descriptors). It was left alone.
var ErrNoTakeover = errors.New("cannot take over")

// errEmptyPredecessor: the daemon serve --takeover found holds no weights
// (it waits for a publish): there is nothing to hand over, so the successor
// replaces it (stops it, as --force does) and starts as usual.
var errEmptyPredecessor = errors.New("the daemon is empty: nothing to hand over")

// takeoverTimeout bounds the successor's talk with the daemon it replaces.
const takeoverTimeout = 30 * time.Second

// takeover is what a successor got from the daemon it replaces.
type takeover struct {
	manifest *manifest
	config   cacheconfig.Config
	model    string
	ids      []sdk.AllocationID
	bytes    uint64
	sizes    uint64
	// tk is the takeover connection, open until the successor serves
	// (Serving) or fails (finish without Serving: the previous daemon takes
	// its lock back); cancel ends its context.
	tk     *fdchannel.Takeover
	cancel context.CancelFunc
}

// finish closes the takeover connection. Before tk.Serving, that leaves the
// previous daemon in charge. Calling it again is a no-op.
func (t *takeover) finish() {
	if t.tk != nil {
		t.tk.Close()
		t.tk = nil
	}
	if t.cancel != nil {
		t.cancel()
		t.cancel = nil
	}
}

// takeOver receives the memory of the live daemon on the device's socket
// (Options.Takeover): it attaches with the config that daemon serves (after
// comparing it with opts.Config's checkpoint when a model was given: the
// attach refuses other weights), asks the descriptor channel for the
// writable descriptors (op TAKEOVER), imports every one into this daemon's
// plugin and says so ("imported"), and returns once that daemon released
// its identity lock and socket ("released"): the caller takes them, listens
// and then sends "serving" (takeover.tk), upon which that daemon ends its
// leases and exits. It reads no tensor byte. (nil, nil): no daemon there, or only a dead one's socket;
// the caller starts as usual.
func (d *Daemon) takeOver(ctx context.Context) (*takeover, error) {
	ctx, cancel := context.WithTimeout(ctx, takeoverTimeout)
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
	sock := d.info.Paths.Socket
	c, err := client.Dial(ctx, client.BySocket(sock), client.Options{ClientName: fmt.Sprintf("wcache serve --takeover (pid %d)", os.Getpid())})
	if errors.Is(err, client.ErrNoDaemon) || errors.Is(err, client.ErrDaemonDead) {
		// No daemon, or a dead one's leftovers (Acquire removes them):
		// nothing to take over.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	if st.State == StateEmpty.String() {
		return nil, fmt.Errorf("take over %s: pid %d: %w", sock, st.PID, errEmptyPredecessor)
	}
	if st.State != StateServing.String() {
		return nil, fmt.Errorf("take over %s: the daemon (pid %d) is %s: %w", sock, st.PID, st.State, ErrNoTakeover)
	}
	cfg := st.Config
	if d.config.CheckpointDigest != "" {
		// This daemon was given a model: only those weights may be taken.
		cfg = d.config
	}
	att, err := c.Attach(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	m := att.Manifest
	for i, h := range m.Handles {
		if !h.IsDescriptor() {
			_ = att.Lease.Close()
			return nil, fmt.Errorf("take over %s: handle %d is %q, a name: its memory cannot change hands (use --force to reload): %w",
				sock, i, h.Kind, ErrNoTakeover)
		}
	}
	req := fdchannel.Request{ID: m.LeaseID}
	copy(req.Token[:], m.FDToken)
	tk, err := fdchannel.RequestTakeover(ctx, fdchannel.Path(sock), req)
	// The lease served only to ask: end it before the handover, which
	// would otherwise make it re-attach (core/client.Lease) to the socket
	// this daemon is about to serve.
	_ = att.Lease.Close()
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	// Closing without Imported (a failed import below) leaves that daemon
	// serving.
	defer func() {
		if !ok {
			tk.Close()
		}
	}()
	descs := tk.Descriptors
	handles := make([]sdk.Handle, len(m.Handles))
	for _, ds := range descs {
		if int(ds.Handle) < len(handles) && ds.Size == m.Handles[ds.Handle].Size {
			h := m.Handles[ds.Handle]
			handles[ds.Handle] = sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size, File: ds.File}
		} else {
			_ = ds.File.Close()
		}
	}
	t := &takeover{config: m.Config, model: st.Model}
	fail := func(err error) (*takeover, error) {
		d.freeAllocs(t.ids)
		closeHandleFiles(handles)
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	for i, h := range handles {
		if h.File == nil {
			return fail(fmt.Errorf("the daemon sent no descriptor for handle %d", i))
		}
		id, err := d.backend.Import(ctx, d.opts.GPU, h)
		if err != nil {
			return fail(fmt.Errorf("import handle %d: %w", i, err))
		}
		t.ids = append(t.ids, id)
		t.sizes += h.Size
	}
	// Every descriptor is this daemon's now: the previous one releases
	// its lock and socket, keeping its memory and leases until "serving".
	if err := tk.Imported(); err != nil {
		return fail(err)
	}
	testDieAfter("imported")
	t.tk, t.cancel, ok = tk, cancel, true
	t.bytes = m.Bytes()
	t.manifest = manifestFromClient(m, cfg.ToProto(), handles)
	d.log.Info("took over the memory of the previous daemon", "pid", st.PID, "generation", m.Generation,
		"handles", len(handles), "bytes", t.bytes)
	return t, nil
}

// manifestFromClient rebuilds the wire manifest of a taken-over
// generation (the same generation, handles and tensors), taking over the
// handles' Files.
func manifestFromClient(m *client.Manifest, cfg *configv1.CacheConfig, handles []sdk.Handle) *manifest {
	out := &manifest{deviceUUID: m.DeviceUUID, backend: m.Backend, config: cfg, digest: m.ConfigDigest,
		generation: m.Generation, metadata: m.Metadata,
		content: cacheconfig.FilesToProto(m.Files), policies: cacheconfig.PolicyStrings(m.ContentPolicies),
		handles: make([]*daemonv1.Handle, len(m.Handles)), tensors: make([]*daemonv1.Tensor, len(m.Tensors))}
	for i, h := range m.Handles {
		out.handles[i] = &daemonv1.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size}
	}
	backing := make([]daemonv1.Tensor, len(m.Tensors))
	for i, t := range m.Tensors {
		backing[i] = daemonv1.Tensor{Name: t.Name, Dtype: t.DType, Shape: t.Shape, HandleIndex: uint32(t.Handle),
			Offset: t.Offset, Length: t.Length}
		if t.Layout != nil {
			backing[i].Layout = &daemonv1.TensorLayout{Storage: t.Layout.Storage, Strides: t.Layout.Strides,
				StorageOffset: t.Layout.StorageOffset}
		}
		out.tensors[i] = &backing[i]
	}
	out.files = newHandleFiles(handles)
	return out
}

// successorAckTimeout bounds each wait of a daemon that sent its
// writable descriptors (op TAKEOVER) for the successor's next message.
const successorAckTimeout = takeoverTimeout

// awaitSuccessor is the old daemon's side of a takeover once the successor
// has its writable descriptors (on connection c; docs/protocol.md,
// "Takeover"): on "imported" it releases its identity lock and socket
// (releaseIdentity, keeping memory and leases) and says "released"; on
// "serving" it hands over. A successor that closes, dies, sends anything
// else or stays silent for successorAckTimeout before "imported" changes
// nothing; before "serving", the daemon takes its lock back and listens
// again (retakeIdentity), its leases untouched. Only if the successor holds
// the lock by then does it hand over all the same.
func (d *Daemon) awaitSuccessor(c *net.UnixConn, successor PeerInfo) {
	if err := awaitAck(c, fdchannel.AckImported); err != nil {
		d.log.Warn("takeover: the successor did not acknowledge the import; serving on", "successor_pid", successor.PID, "error", err)
		return
	}
	err := d.releaseIdentity()
	if err == nil {
		d.log.Info("takeover: released the lock and socket to the successor; serving the leases until it serves", "successor_pid", successor.PID)
		if err = fdpass.Send(c, fdchannel.MarshalAck(fdchannel.AckReleased)); err == nil {
			err = awaitAck(c, fdchannel.AckServing)
		}
	}
	if err == nil {
		d.handOver(successor)
		return
	}
	d.log.Warn("takeover: the successor failed before it served; taking the lock back", "successor_pid", successor.PID, "error", err)
	ctx, cancel := context.WithTimeout(context.Background(), takeoverTimeout)
	defer cancel()
	if rerr := d.retakeIdentity(ctx); rerr != nil {
		var live *daemonfile.LiveDaemonError
		if errors.As(rerr, &live) {
			d.log.Warn("takeover: the successor holds the lock after all: handing over", "error", rerr)
			d.handOver(successor)
			return
		}
		d.log.Error("takeover: cannot serve again: stopping", "error", rerr)
		d.reg.stop(status.Errorf(codes.Unavailable, "daemon of %s stopped: a takeover failed and it could not listen again: %v", d.info.DeviceUUID, rerr))
		d.requestShutdown()
		return
	}
	d.log.Info("takeover: serving again", "socket", d.info.Paths.Socket)
}

// awaitAck waits up to successorAckTimeout for the successor's message of
// kind want on c.
func awaitAck(c *net.UnixConn, want fdchannel.AckKind) error {
	_ = c.SetDeadline(time.Now().Add(successorAckTimeout))
	buf := make([]byte, fdchannel.AckSize+1)
	n, files, err := fdpass.Recv(c, buf, 0)
	for _, f := range files {
		_ = f.Close()
	}
	if err != nil {
		return fmt.Errorf("waiting for %q: %w", want, err)
	}
	return fdchannel.ParseAck(buf[:n], want)
}

// handOver is the old daemon's side of a takeover, once the successor has
// imported its descriptors: every lease ends at once (the clients'
// mappings stay valid: the memory is the successor's now; the clients
// re-attach to the same generation, core/client.Lease), and the daemon
// shuts down. Freeing its allocations then frees only this daemon's
// references.
func (d *Daemon) handOver(successor PeerInfo) {
	d.log.Info("handing over to a successor daemon: ending every lease and stopping", "successor_pid", successor.PID)
	d.reg.stop(status.Errorf(codes.Unavailable,
		"daemon of %s %s (pid %d): attach again; mappings stay valid", d.info.DeviceUUID, fdchannel.HandoverMessage, successor.PID))
	d.requestShutdown()
}

// adopt makes a taken-over generation what the daemon serves (Start, before
// it listens): the same generation, manifest and config, and load
// statistics that say nothing was read (Source "takeover").
func (d *Daemon) adopt(t *takeover, planned, locked time.Duration) {
	d.allocs, d.manifest, d.generation = t.ids, t.manifest, t.manifest.generation
	d.manifest.published = t.model == "" // a file load always names its model
	d.config, d.configProto = t.config, t.manifest.config
	d.info.Config, d.info.ConfigDigest = t.config, t.manifest.digest
	if d.info.Model == "" {
		d.info.Model = t.model
	}
	d.info.Tensors = len(t.manifest.tensors)
	d.info.Load = LoadStats{Bytes: t.bytes, Adopted: t.bytes, AllocatedBytes: t.sizes, Allocations: len(t.ids),
		Plan: planned, Lock: locked, Source: SourceTakeover}
	d.started = time.Now()
}
