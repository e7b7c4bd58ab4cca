package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/fdpass"
	"github.com/wcache/wcache/sdk"
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

// takeover is what a successor got from the daemon it replaces: every
// generation it held.
type takeover struct {
	gens []*takenGen
	// adopted: the generations are the daemon's now (freeAll frees them).
	adopted bool
	// tk is the takeover connection, open until the successor serves
	// (Serving) or fails (finish without Serving: the previous daemon takes
	// its lock back); cancel ends its context.
	tk     *fdchannel.Takeover
	cancel context.CancelFunc
	// peerListener is the previous daemon's peer endpoint socket, passed
	// with "released" (nil: it had none); Start serves peers on it.
	peerListener *os.File
}

// takenGen is one generation taken over.
type takenGen struct {
	manifest *manifest
	config   cacheconfig.Config
	model    string
	ids      []sdk.AllocationID
	bytes    uint64
	sizes    uint64
	// published: the generation was published (its manifest names no
	// model directory).
	published bool
	g         *generation
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
	if t.peerListener != nil {
		_ = t.peerListener.Close()
		t.peerListener = nil
	}
}

// takeOver receives the memory of every generation of the live daemon on
// the device's socket (Options.Takeover): it attaches to each generation
// that daemon serves, with its config (after attaching with the config of
// each model this daemon was given, jobs: the attach refuses other
// weights), asks the descriptor channel for the writable descriptors (op
// TAKEOVER: those of every generation the successor holds a lease on,
// which must be all of them, in generation order), imports every one into
// this daemon's plugin and says so ("imported"), and returns once that
// daemon released its identity lock and socket ("released"): the caller
// takes them, listens and then sends "serving" (takeover.tk), upon which
// that daemon ends its leases and exits. It reads no tensor byte. (nil,
// nil): no daemon there, or only a dead one's socket; the caller starts as
// usual.
func (d *Daemon) takeOver(ctx context.Context, jobs []*loadJob) (*takeover, error) {
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
	held := st.Generations
	if len(held) == 0 { // a daemon older than several generations
		held = []client.GenerationStatus{{Generation: st.Generation, State: st.State, Model: st.Model, Config: st.Config}}
	}
	for _, g := range held {
		if g.State != StateServing.String() {
			return nil, fmt.Errorf("take over %s: generation %d of the daemon (pid %d) is %s: %w", sock, g.Generation, st.PID, g.State, ErrNoTakeover)
		}
	}
	// One lease per generation, by generation id.
	atts := map[uint64]*client.Attachment{}
	defer func() {
		for _, a := range atts {
			_ = a.Lease.Close()
		}
	}()
	attach := func(cfg cacheconfig.Config) error {
		a, err := c.AttachForCopy(ctx, cfg)
		if err != nil {
			return fmt.Errorf("take over %s: %w", sock, err)
		}
		if atts[a.Manifest.Generation] != nil {
			_ = a.Lease.Close()
			return nil
		}
		atts[a.Manifest.Generation] = a
		return nil
	}
	// This daemon was given models: only those weights may be taken (the
	// attach compares), beside the others the daemon holds.
	for _, j := range jobs {
		if err := attach(j.g.config); err != nil {
			return nil, err
		}
	}
	for _, g := range held {
		if err := attach(g.Config); err != nil {
			return nil, err
		}
	}
	models := map[uint64]string{}
	for _, g := range held {
		models[g.Generation] = g.Model
	}
	order := slices.Sorted(maps.Keys(atts))
	for _, gid := range order {
		for i, h := range atts[gid].Manifest.Handles {
			if !h.IsDescriptor() {
				return nil, fmt.Errorf("take over %s: generation %d: handle %d is %q, a name: its memory cannot change hands (use --force to reload): %w",
					sock, gid, i, h.Kind, ErrNoTakeover)
			}
		}
	}
	first := atts[order[0]].Manifest
	req := fdchannel.Request{ID: first.LeaseID}
	copy(req.Token[:], first.FDToken)
	tk, err := fdchannel.RequestTakeover(ctx, fdchannel.Path(sock), req)
	// The leases served only to ask: end them before the handover, which
	// would otherwise make them re-attach (core/client.Lease) to the
	// socket this daemon is about to serve.
	attached := map[uint64]*client.Manifest{}
	for gid, a := range atts {
		attached[gid] = a.Manifest
		_ = a.Lease.Close()
		delete(atts, gid)
	}
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
	t := &takeover{}
	var unclaimed []sdk.Handle
	fail := func(err error) (*takeover, error) {
		for _, tg := range t.gens {
			d.freeAllocs(tg.ids)
			tg.manifest.files.close()
		}
		closeHandleFiles(unclaimed)
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	// The descriptors come generation after generation, in generation
	// order, each generation's in handle order.
	descs := tk.Descriptors
	next := 0
	for _, gid := range order {
		m := attached[gid]
		handles := make([]sdk.Handle, len(m.Handles))
		for i, h := range m.Handles {
			if next >= len(descs) {
				break
			}
			ds := descs[next]
			if ds.Handle != uint32(i) || ds.Size != h.Size {
				break
			}
			handles[i] = sdk.Handle{Kind: h.Kind, Data: h.Data, Size: h.Size, File: ds.File}
			descs[next].File = nil
			next++
		}
		tg := &takenGen{config: m.Config, model: models[gid], published: models[gid] == "", bytes: m.Bytes()}
		unclaimed = handles
		for i, h := range handles {
			if h.File == nil {
				fdchannel.CloseAll(descs[next:])
				return fail(fmt.Errorf("generation %d: the daemon sent no descriptor for handle %d", gid, i))
			}
			id, err := d.backend.Import(ctx, d.opts.GPU, h)
			if err != nil {
				fdchannel.CloseAll(descs[next:])
				d.freeAllocs(tg.ids)
				return fail(fmt.Errorf("generation %d: import handle %d: %w", gid, i, err))
			}
			tg.ids = append(tg.ids, id)
			tg.sizes += h.Size
		}
		unclaimed = nil
		tg.manifest = manifestFromClient(m, m.Config.ToProto(), handles)
		t.gens = append(t.gens, tg)
	}
	if next != len(descs) {
		fdchannel.CloseAll(descs[next:])
		return fail(fmt.Errorf("the daemon sent %d descriptors, its %d generations have %d handles", len(descs), len(order), next))
	}
	// Every descriptor is this daemon's now: the previous one releases
	// its lock and socket, keeping its memory and leases until "serving".
	if err := tk.Imported(); err != nil {
		return fail(err)
	}
	testDieAfter("imported")
	t.tk, t.cancel, t.peerListener, ok = tk, cancel, tk.PeerListener, true
	tk.PeerListener = nil
	var bytes uint64
	for _, tg := range t.gens {
		bytes += tg.bytes
	}
	d.log.Info("took over the memory of the previous daemon", "pid", st.PID, "generations", order,
		"bytes", bytes)
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
		backing[i].Layout = tensorLayoutToProto(t.Layout)
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
// (releaseIdentity, keeping memory and leases), pauses its peer endpoint
// and says "released", passing the endpoint's socket along; then it waits
// for "serving". Whatever comes then — "serving", a close, silence for
// successorAckTimeout, anything else — it hands over only if it sees the
// successor (the pid that asked, by SO_PEERCRED) serve: hold the identity
// lock, listen on the socket and name itself in the ready file
// (daemonfile.VerifySuccessor). A successor's word ends nothing. Else it
// takes its lock back and listens again (retakeIdentity), its leases
// untouched. A successor that closes, dies or stays silent before
// "imported" changes nothing at all.
func (d *Daemon) awaitSuccessor(c *net.UnixConn, successor PeerInfo) {
	if err := awaitAck(c, fdchannel.AckImported); err != nil {
		d.log.Warn("takeover: the successor did not acknowledge the import; serving on", "successor_pid", successor.PID, "error", err)
		return
	}
	err := d.releaseIdentity()
	if err == nil {
		d.log.Info("takeover: released the lock and socket to the successor; serving the leases until it serves", "successor_pid", successor.PID)
		var peerLis *os.File
		peerLis, err = d.pausePeer()
		if err == nil {
			if peerLis != nil {
				err = fdpass.Send(c, fdchannel.MarshalAck(fdchannel.AckReleased), peerLis)
				_ = peerLis.Close() // the message carries its own
			} else {
				err = fdpass.Send(c, fdchannel.MarshalAck(fdchannel.AckReleased))
			}
		}
		if err == nil {
			err = awaitAck(c, fdchannel.AckServing)
		}
	}
	if err == nil {
		if verr := daemonfile.VerifySuccessor(d.info.Paths, int(successor.PID)); verr != nil {
			err = fmt.Errorf("it said it serves, but: %w", verr)
		}
	}
	if err == nil {
		d.handOver(successor)
		return
	}
	d.log.Warn("takeover: the successor is not seen serving; taking the lock back", "successor_pid", successor.PID, "error", err)
	ctx, cancel := context.WithTimeout(context.Background(), takeoverTimeout)
	defer cancel()
	rerr := d.retakeIdentity(ctx)
	var live *daemonfile.LiveDaemonError
	if errors.As(rerr, &live) {
		// Someone holds the lock: the successor, still starting (it said
		// nothing, or too early)? Hand over once it is seen serving.
		verr := d.awaitVerifiedSuccessor(ctx, successor)
		if verr == nil {
			d.log.Warn("takeover: the successor holds the lock and serves after all: handing over", "successor_pid", successor.PID)
			d.handOver(successor)
			return
		}
		rerr = fmt.Errorf("%w; and the holder is not seen serving as the successor: %v", rerr, verr)
	}
	if rerr != nil {
		d.log.Error("takeover: cannot serve again: stopping", "error", rerr)
		d.reg.stop(status.Errorf(codes.Unavailable, "daemon of %s stopped: a takeover failed and it could not listen again: %v", d.info.DeviceUUID, rerr))
		d.requestShutdown()
		return
	}
	d.resumePeer()
	d.log.Info("takeover: serving again", "socket", d.info.Paths.Socket)
}

// successorPoll is how often awaitVerifiedSuccessor looks again.
const successorPoll = 100 * time.Millisecond

// awaitVerifiedSuccessor waits, until ctx ends, for successor to be seen
// serving (daemonfile.VerifySuccessor); it returns the last check's error.
func (d *Daemon) awaitVerifiedSuccessor(ctx context.Context, successor PeerInfo) error {
	for {
		err := daemonfile.VerifySuccessor(d.info.Paths, int(successor.PID))
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(successorPoll):
		}
	}
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

// adopt makes the taken-over generations the daemon's (Start, before it
// listens): the same generations, manifests and configs, and load
// statistics that say nothing was read (Source "takeover").
func (d *Daemon) adopt(t *takeover, planned, locked time.Duration) {
	d.reg.mu.Lock()
	defer d.reg.mu.Unlock()
	now := time.Now()
	for _, tg := range t.gens {
		m := tg.manifest
		m.published = tg.published
		g := &generation{id: m.generation, state: StateServing, model: tg.model, config: tg.config,
			configProto: m.config, digest: m.digest, compare: compareFor(tg.published, len(m.content), tg.config.EngineName),
			tensors: len(m.tensors), allocs: tg.ids, manifest: m, started: now,
			content: cacheconfig.FilesFromProto(m.content),
			load: LoadStats{Bytes: tg.bytes, Adopted: tg.bytes, AllocatedBytes: tg.sizes, Allocations: len(tg.ids),
				Plan: planned, Lock: locked, Source: SourceTakeover}}
		tg.g = g
		d.reg.addGenLocked(g)
	}
	t.adopted = true
	d.started = now
}
