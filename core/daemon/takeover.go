package daemon

import (
	"context"
	"net"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon/handover"
	"github.com/wcache/wcache/core/daemon/registry"
	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/sdk"
)

// This file is the daemon's side of a takeover (serve --takeover): the
// handover itself, both ways, is core/daemon/handover's; here the
// generations received become the daemon's (adopt), and the old daemon
// hands over (handOver) or serves again.

// ErrNoTakeover: serve --takeover found a daemon whose memory cannot be
// taken over (its handles are names, not descriptors). It was left alone.
var ErrNoTakeover = handover.ErrNoTakeover

// takeover is what a successor got from the daemon it replaces: every
// generation it held (handover.Taken), each with the manifest this daemon
// serves it with.
type takeover struct {
	*handover.Taken
	gens []*takenGen
	// adopted: the generations are the daemon's now (freeAll frees them).
	adopted bool
}

// takenGen is one generation taken over.
type takenGen struct {
	*handover.Gen
	// manifest holds the generation's handles' descriptors from now on.
	manifest *manifest
	// g is the generation once adopted.
	g *generation
}

// takeOver receives the memory of every generation of the live daemon on
// the device's socket (Options.Takeover; handover.Receive), after
// attaching with the config of each model this daemon was given (jobs:
// the attach refuses other weights). (nil, nil): no daemon there; the
// caller starts as usual.
func (d *Daemon) takeOver(ctx context.Context, jobs []*loadJob) (*takeover, error) {
	configs := make([]cacheconfig.Config, len(jobs))
	for i, j := range jobs {
		configs[i] = j.g.Config
	}
	taken, err := handover.Receive(ctx, d.info.Paths.Socket, configs, takeoverHost{d}, d.log)
	if taken == nil || err != nil {
		return nil, err
	}
	t := &takeover{Taken: taken}
	for _, g := range taken.Gens {
		t.gens = append(t.gens, &takenGen{Gen: g, manifest: manifestFromClient(g.Manifest, g.Manifest.Config.ToProto(), g.Handles)})
	}
	return t, nil
}

// takeoverHost is the daemon as handover's Importer and Predecessor.
type takeoverHost struct{ d *Daemon }

func (h takeoverHost) Import(ctx context.Context, hd sdk.Handle) (sdk.AllocationID, error) {
	return h.d.backend.Import(ctx, h.d.opts.GPU, hd)
}

func (h takeoverHost) FreeAllocs(ids []sdk.AllocationID)        { h.d.freeAllocs(ids) }
func (h takeoverHost) ReleaseIdentity() error                   { return h.d.releaseIdentity() }
func (h takeoverHost) PausePeer() (*os.File, error)             { return h.d.pausePeer() }
func (h takeoverHost) RetakeIdentity(ctx context.Context) error { return h.d.retakeIdentity(ctx) }
func (h takeoverHost) ResumePeer()                              { h.d.resumePeer() }
func (h takeoverHost) HandOver(successor int32)                 { h.d.handOver(successor) }

// CannotServe ends every lease (Unavailable) and stops the daemon.
func (h takeoverHost) CannotServe(err error) {
	d := h.d
	d.reg.Stop(status.Errorf(codes.Unavailable, "daemon of %s stopped: a takeover failed and it could not listen again: %v", d.info.DeviceUUID, err))
	d.requestShutdown()
}

// awaitSuccessor is the old daemon's side of a takeover once the successor
// has its writable descriptors on c (handover.AwaitSuccessor).
func (d *Daemon) awaitSuccessor(c *net.UnixConn, successor PeerInfo) {
	handover.AwaitSuccessor(c, successor.PID, takeoverHost{d}, d.info.Paths, d.log)
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

// handOver is the old daemon's side of a takeover, once the successor has
// imported its descriptors: every lease ends at once (the clients'
// mappings stay valid: the memory is the successor's now; the clients
// re-attach to the same generation, core/client.Lease), and the daemon
// shuts down. Freeing its allocations then frees only this daemon's
// references.
func (d *Daemon) handOver(successor int32) {
	d.log.Info("handing over to a successor daemon: ending every lease and stopping", "successor_pid", successor)
	d.reg.Stop(status.Errorf(codes.Unavailable,
		"daemon of %s %s (pid %d): attach again; mappings stay valid", d.info.DeviceUUID, fdchannel.HandoverMessage, successor))
	d.requestShutdown()
}

// adopt makes the taken-over generations the daemon's (Start, before it
// listens): the same generations, manifests and configs, and load
// statistics that say nothing was read (Source "takeover").
func (d *Daemon) adopt(t *takeover, planned, locked time.Duration) {
	now := time.Now()
	gens := make([]*generation, len(t.gens))
	for i, tg := range t.gens {
		m, cfg := tg.manifest, tg.Manifest.Config
		m.published = tg.Published
		g := &generation{ID: m.generation, State: StateServing, Model: tg.Model, Config: cfg,
			ConfigProto: m.config, Digest: m.digest, Compare: registry.CompareFor(tg.Published, len(m.content), cfg.EngineName),
			Tensors: len(m.tensors), Allocs: tg.IDs, Manifest: m, Started: now,
			Content: cacheconfig.FilesFromProto(m.content),
			Load: LoadStats{Bytes: tg.Bytes, Adopted: tg.Bytes, AllocatedBytes: tg.Sizes, Allocations: len(tg.IDs),
				Plan: planned, Lock: locked, Source: SourceTakeover}}
		tg.g, gens[i] = g, g
	}
	d.reg.Add(gens...)
	t.adopted = true
	d.started = now
}
