// Package handover is the handover of a daemon's memory to its successor
// (serve --takeover; docs/protocol.md, "Takeover"), with no tensor byte
// read: the successor's side (Receive: attach to every generation the live
// daemon serves, ask its descriptor channel for the writable descriptors,
// import them), the old daemon's side (AwaitSuccessor: release the
// identity, pass the peer socket along, hand over only once the successor
// is seen serving, else serve again), and the listeners that pause while
// the identity changes hands (Listener, PeerListener).
//
// The daemon reaches it through Importer and Predecessor, defined here;
// nothing here imports core/daemon.
package handover

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/fdpass"
	"github.com/wcache/wcache/sdk"
)

// ErrNoTakeover: serve --takeover found a daemon whose memory cannot be
// taken over (its handles are names, not descriptors). It was left alone.
var ErrNoTakeover = errors.New("cannot take over")

// ErrEmptyPredecessor: the daemon serve --takeover found holds no weights
// (it waits for a publish): there is nothing to hand over, so the successor
// replaces it (stops it, as --force does) and starts as usual.
var ErrEmptyPredecessor = errors.New("the daemon is empty: nothing to hand over")

// Timeout bounds the successor's talk with the daemon it replaces, and the
// old daemon's retaking of its identity when the successor fails.
const Timeout = 30 * time.Second

// How a daemon's Status spells the states a takeover checks (core/daemon's
// StateEmpty and StateServing; its tests check they are its own).
const (
	StateEmpty   = "empty"
	StateServing = "serving"
)

// Importer is what the successor's side uses of its daemon.
type Importer interface {
	// Import imports h into the daemon's plugin, on its device.
	Import(ctx context.Context, h sdk.Handle) (sdk.AllocationID, error)
	// FreeAllocs frees ids (bounded; a failure is logged).
	FreeAllocs(ids []sdk.AllocationID)
}

// Gen is one generation taken over.
type Gen struct {
	// Manifest is the generation as the old daemon served it (config,
	// tensors, content records, handles).
	Manifest *client.Manifest
	// Model is its model directory ("" for a publication: Published).
	Model     string
	Published bool
	// Handles are its handles in order, each with the descriptor received
	// (the caller takes their Files over); IDs are their imports into this
	// daemon's plugin.
	Handles []sdk.Handle
	IDs     []sdk.AllocationID
	// Bytes is the manifest's byte count, Sizes the handles' sizes summed.
	Bytes, Sizes uint64
}

// Taken is what a successor got from the daemon it replaces: every
// generation it held.
type Taken struct {
	Gens []*Gen
	// Conn is the takeover connection, open until the successor serves
	// (Conn.Serving) or fails (Finish without Serving: the previous
	// daemon takes its lock back).
	Conn   *fdchannel.Takeover
	cancel context.CancelFunc
	// PeerListener is the previous daemon's peer endpoint socket, passed
	// with "released" (nil: it had none); the successor serves peers on it.
	PeerListener *os.File
}

// Finish closes the takeover connection. Before Conn.Serving, that leaves
// the previous daemon in charge. Calling it again is a no-op.
func (t *Taken) Finish() {
	if t.Conn != nil {
		t.Conn.Close()
		t.Conn = nil
	}
	if t.cancel != nil {
		t.cancel()
		t.cancel = nil
	}
	if t.PeerListener != nil {
		_ = t.PeerListener.Close()
		t.PeerListener = nil
	}
}

// release frees every generation imported so far and closes its handles'
// descriptors.
func (t *Taken) release(imp Importer) {
	for _, g := range t.Gens {
		imp.FreeAllocs(g.IDs)
		closeHandleFiles(g.Handles)
	}
}

// Receive receives the memory of every generation of the live daemon on
// socket sock: it attaches to each generation that daemon serves, with
// its config (after attaching with configs, those of the models this
// daemon was given: the attach refuses other weights), asks the
// descriptor channel for the writable descriptors (op TAKEOVER: those of
// every generation the successor holds a lease on, which must be all of
// them, in generation order), imports every one through imp and says so
// ("imported"), and returns once that daemon released its identity lock
// and socket ("released"): the caller takes them, listens and then sends
// "serving" (Taken.Conn), upon which that daemon ends its leases and
// exits. It reads no tensor byte. (nil, nil): no daemon there, or only a
// dead one's socket; the caller starts as usual. An error wrapping
// ErrEmptyPredecessor: that daemon holds nothing; ErrNoTakeover: its
// memory cannot change hands (it is left serving).
func Receive(ctx context.Context, sock string, configs []cacheconfig.Config, imp Importer, log hclog.Logger) (*Taken, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
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
	st, held, err := servingGenerations(ctx, c, sock)
	if err != nil {
		return nil, err
	}
	atts := leases{}
	defer atts.close()
	if err := atts.attachAll(ctx, c, sock, configs, held); err != nil {
		return nil, err
	}
	order := slices.Sorted(maps.Keys(atts))
	if err := atts.checkDescriptors(sock, order); err != nil {
		return nil, err
	}
	tk, attached, err := requestDescriptors(ctx, sock, atts)
	if err != nil {
		return nil, err
	}
	// Closing without Imported (a failed import below) leaves that daemon
	// serving.
	defer func() {
		if !ok {
			tk.Close()
		}
	}()
	t, err := importAll(ctx, tk.Descriptors, order, attached, modelsOf(held), imp)
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	// Every descriptor is this daemon's now: the previous one releases
	// its lock and socket, keeping its memory and leases until "serving".
	if err := tk.Imported(); err != nil {
		t.release(imp)
		return nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	testDieAfter("imported")
	t.Conn, t.cancel, t.PeerListener, ok = tk, cancel, tk.PeerListener, true
	tk.PeerListener = nil
	var bytes uint64
	for _, g := range t.Gens {
		bytes += g.Bytes
	}
	log.Info("took over the memory of the previous daemon", "pid", st.PID, "generations", order,
		"bytes", bytes)
	return t, nil
}

// servingGenerations is the live daemon's status and the generations it
// holds, each of which must be serving.
func servingGenerations(ctx context.Context, c *client.Client, sock string) (*client.Status, []client.GenerationStatus, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	if st.State == StateEmpty {
		return nil, nil, fmt.Errorf("take over %s: pid %d: %w", sock, st.PID, ErrEmptyPredecessor)
	}
	if st.State != StateServing {
		return nil, nil, fmt.Errorf("take over %s: the daemon (pid %d) is %s: %w", sock, st.PID, st.State, ErrNoTakeover)
	}
	held := st.Generations
	if len(held) == 0 { // a daemon that reports one generation only
		held = []client.GenerationStatus{{Generation: st.Generation, State: st.State, Model: st.Model, Config: st.Config}}
	}
	for _, g := range held {
		if g.State != StateServing {
			return nil, nil, fmt.Errorf("take over %s: generation %d of the daemon (pid %d) is %s: %w", sock, g.Generation, st.PID, g.State, ErrNoTakeover)
		}
	}
	return st, held, nil
}

// modelsOf maps the generations held to their model directories.
func modelsOf(held []client.GenerationStatus) map[uint64]string {
	models := map[uint64]string{}
	for _, g := range held {
		models[g.Generation] = g.Model
	}
	return models
}

// leases are the successor's attachments to the live daemon: one lease per
// generation, by generation id.
type leases map[uint64]*client.Attachment

// close ends the leases still held.
func (atts leases) close() {
	for _, a := range atts {
		_ = a.Lease.Close()
	}
}

// attachAll attaches with configs (this daemon was given models: only
// those weights may be taken, the attach compares), then with the config
// of every generation held, keeping one lease per generation.
func (atts leases) attachAll(ctx context.Context, c *client.Client, sock string, configs []cacheconfig.Config, held []client.GenerationStatus) error {
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
	for _, cfg := range configs {
		if err := attach(cfg); err != nil {
			return err
		}
	}
	for _, g := range held {
		if err := attach(g.Config); err != nil {
			return err
		}
	}
	return nil
}

// checkDescriptors refuses a generation with a handle that is a name (its
// memory cannot change hands).
func (atts leases) checkDescriptors(sock string, order []uint64) error {
	for _, gid := range order {
		for i, h := range atts[gid].Manifest.Handles {
			if !h.IsDescriptor() {
				return fmt.Errorf("take over %s: generation %d: handle %d is %q, a name: its memory cannot change hands (use --force to reload): %w",
					sock, gid, i, h.Kind, ErrNoTakeover)
			}
		}
	}
	return nil
}

// requestDescriptors asks the descriptor channel for the writable
// descriptors of every generation leased (op TAKEOVER, by the first
// generation's lease), then ends the leases whatever the answer: they
// served only to ask, and a lease alive at the handover would re-attach
// (core/client.Lease) to the socket this daemon is about to serve. It
// returns the generations' manifests by id.
func requestDescriptors(ctx context.Context, sock string, atts leases) (*fdchannel.Takeover, map[uint64]*client.Manifest, error) {
	first := atts[slices.Min(slices.Collect(maps.Keys(atts)))].Manifest
	req := fdchannel.Request{ID: first.LeaseID}
	copy(req.Token[:], first.FDToken)
	tk, err := fdchannel.RequestTakeover(ctx, fdchannel.Path(sock), req)
	attached := map[uint64]*client.Manifest{}
	for gid, a := range atts {
		attached[gid] = a.Manifest
		_ = a.Lease.Close()
		delete(atts, gid)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("take over %s: %w", sock, err)
	}
	return tk, attached, nil
}

// importAll imports descs, which come generation after generation in
// generation order (order), each generation's in handle order, checking
// each against its manifest's handle (index and size). On an error
// everything imported is freed and every descriptor closed.
func importAll(ctx context.Context, descs []fdchannel.Descriptor, order []uint64, attached map[uint64]*client.Manifest,
	models map[uint64]string, imp Importer) (*Taken, error) {
	t := &Taken{}
	var unclaimed []sdk.Handle
	fail := func(err error) (*Taken, error) {
		t.release(imp)
		closeHandleFiles(unclaimed)
		return nil, err
	}
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
		g := &Gen{Manifest: m, Model: models[gid], Published: models[gid] == "", Bytes: m.Bytes(), Handles: handles}
		unclaimed = handles
		for i, h := range handles {
			if h.File == nil {
				fdchannel.CloseAll(descs[next:])
				return fail(fmt.Errorf("generation %d: the daemon sent no descriptor for handle %d", gid, i))
			}
			id, err := imp.Import(ctx, h)
			if err != nil {
				fdchannel.CloseAll(descs[next:])
				imp.FreeAllocs(g.IDs)
				return fail(fmt.Errorf("generation %d: import handle %d: %w", gid, i, err))
			}
			g.IDs = append(g.IDs, id)
			g.Sizes += h.Size
		}
		unclaimed = nil
		t.Gens = append(t.Gens, g)
	}
	if next != len(descs) {
		fdchannel.CloseAll(descs[next:])
		return fail(fmt.Errorf("the daemon sent %d descriptors, its %d generations have %d handles", len(descs), len(order), next))
	}
	return t, nil
}

// closeHandleFiles closes the descriptors of handles.
func closeHandleFiles(handles []sdk.Handle) {
	for _, h := range handles {
		if h.File != nil {
			_ = h.File.Close()
		}
	}
}

// successorAckTimeout bounds each wait of a daemon that sent its
// writable descriptors (op TAKEOVER) for the successor's next message.
const successorAckTimeout = Timeout

// Predecessor is what the old daemon's side of a takeover uses of its
// daemon.
type Predecessor interface {
	// ReleaseIdentity stops accepting (the connections, and so the
	// leases, stay), removes the socket, descriptor channel and ready file
	// and releases the identity lock, keeping the memory.
	ReleaseIdentity() error
	// PausePeer pauses the peer endpoint and returns a duplicate of its
	// socket for the successor (nil, nil without an endpoint).
	PausePeer() (*os.File, error)
	// RetakeIdentity takes the lock back and listens again (a
	// *daemonfile.LiveDaemonError: someone else holds the lock).
	RetakeIdentity(ctx context.Context) error
	// ResumePeer accepts peers again.
	ResumePeer()
	// HandOver ends every lease and stops the daemon: the successor
	// (pid) serves its memory now.
	HandOver(successor int32)
	// CannotServe stops the daemon, which could not listen again after a
	// failed takeover (err says why).
	CannotServe(err error)
}

// AwaitSuccessor is the old daemon's side of a takeover once the successor
// has its writable descriptors (on connection c; docs/protocol.md,
// "Takeover"): on "imported" it releases its identity lock and socket
// (Predecessor.ReleaseIdentity, keeping memory and leases), pauses its peer endpoint
// and says "released", passing the endpoint's socket along; then it waits
// for "serving". Whatever comes then — "serving", a close, silence for
// successorAckTimeout, anything else — it hands over only if it sees the
// successor (the pid that asked, by SO_PEERCRED) serve: hold the identity
// lock, listen on the socket and name itself in the ready file
// (daemonfile.VerifySuccessor). A successor's word ends nothing. Else it
// takes its lock back and listens again (Predecessor.RetakeIdentity), its leases
// untouched. A successor that closes, dies or stays silent before
// "imported" changes nothing at all.
func AwaitSuccessor(c *net.UnixConn, successor int32, p Predecessor, at paths.Paths, log hclog.Logger) {
	if err := awaitAck(c, fdchannel.AckImported); err != nil {
		log.Warn("takeover: the successor did not acknowledge the import; serving on", "successor_pid", successor, "error", err)
		return
	}
	err := release(c, successor, p, log)
	if err == nil {
		if verr := daemonfile.VerifySuccessor(at, int(successor)); verr != nil {
			err = fmt.Errorf("it said it serves, but: %w", verr)
		}
	}
	if err == nil {
		p.HandOver(successor)
		return
	}
	log.Warn("takeover: the successor is not seen serving; taking the lock back", "successor_pid", successor, "error", err)
	serveAgain(successor, p, at, log)
}

// release releases the identity to the successor, passes the paused peer
// socket along with "released", and waits for "serving".
func release(c *net.UnixConn, successor int32, p Predecessor, log hclog.Logger) error {
	if err := p.ReleaseIdentity(); err != nil {
		return err
	}
	log.Info("takeover: released the lock and socket to the successor; serving the leases until it serves", "successor_pid", successor)
	peerLis, err := p.PausePeer()
	if err != nil {
		return err
	}
	if peerLis != nil {
		err = fdpass.Send(c, fdchannel.MarshalAck(fdchannel.AckReleased), peerLis)
		_ = peerLis.Close() // the message carries its own
	} else {
		err = fdpass.Send(c, fdchannel.MarshalAck(fdchannel.AckReleased))
	}
	if err != nil {
		return err
	}
	return awaitAck(c, fdchannel.AckServing)
}

// serveAgain takes the identity back after a successor that was not seen
// serving — or hands over after all when the successor holds the lock and
// is seen serving by the end of Timeout; a daemon that can do neither
// stops.
func serveAgain(successor int32, p Predecessor, at paths.Paths, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	rerr := p.RetakeIdentity(ctx)
	var live *daemonfile.LiveDaemonError
	if errors.As(rerr, &live) {
		// Someone holds the lock: the successor, still starting (it said
		// nothing, or too early)? Hand over once it is seen serving.
		verr := awaitVerifiedSuccessor(ctx, at, successor)
		if verr == nil {
			log.Warn("takeover: the successor holds the lock and serves after all: handing over", "successor_pid", successor)
			p.HandOver(successor)
			return
		}
		rerr = fmt.Errorf("%w; and the holder is not seen serving as the successor: %v", rerr, verr)
	}
	if rerr != nil {
		log.Error("takeover: cannot serve again: stopping", "error", rerr)
		p.CannotServe(rerr)
		return
	}
	p.ResumePeer()
	log.Info("takeover: serving again", "socket", at.Socket)
}

// successorPoll is how often awaitVerifiedSuccessor looks again.
const successorPoll = 100 * time.Millisecond

// awaitVerifiedSuccessor waits, until ctx ends, for successor to be seen
// serving (daemonfile.VerifySuccessor); it returns the last check's error.
func awaitVerifiedSuccessor(ctx context.Context, at paths.Paths, successor int32) error {
	for {
		err := daemonfile.VerifySuccessor(at, int(successor))
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

// testDieAfter names the point of a takeover at which a successor kills
// itself (SIGKILL), from WCACHE_TEST_TAKEOVER_DIE_AFTER. It is read only
// by the end-to-end tests (test/e2e): "imported" dies once the old daemon
// has released its lock for the successor, before the successor listens.
func testDieAfter(point string) {
	if os.Getenv("WCACHE_TEST_TAKEOVER_DIE_AFTER") == point {
		p, err := os.FindProcess(os.Getpid())
		if err == nil {
			_ = p.Kill()
		}
	}
}
