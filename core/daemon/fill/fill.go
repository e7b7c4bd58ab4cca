// Package fill fills a daemon's arenas from elsewhere than the checkpoint's
// files: from a sibling daemon's GPU on the same node (Sibling: device to
// device through the daemon's own plugin, sdk.PeerCopy) and from other
// nodes' daemons (Net: core/peer's mutual-TLS fetch into memfd arenas, or
// staged window by window into device arenas). Every fill proves its copy
// against what the LOCAL files are known to hold (localcontent.go), never
// against the source's memory or records alone. Source is the other side:
// the daemon's generations served to other nodes' fills (peer.Source).
//
// The daemon drives the fillers through one seam (core/daemon's
// peerFiller, which Sibling and Net implement); what a filler needs of the
// daemon is the Daemon interface below, and the daemon's settings it reads
// are an Env; what Source serves is Generations. Nothing here imports
// core/daemon.
package fill

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
)

// Daemon is what the fillers use of the daemon that runs them: its current
// backend (replaced when the plugin restarts) and its allocation steps.
type Daemon interface {
	// Backend is the daemon's plugin, as of the call.
	Backend() sdk.Backend
	// Allocate reserves every arena of pl, appending each id to *ids as
	// soon as it exists, and returns the bytes the backend reserved,
	// summed (each at least the plan's size, or an error).
	Allocate(ctx context.Context, pl *plan.Plan, ids *[]sdk.AllocationID) (uint64, error)
	// Export exports every allocation of ids; on an error nothing stays
	// open.
	Export(ctx context.Context, ids []sdk.AllocationID) ([]sdk.Handle, error)
	// FreeAllocs frees ids (bounded; a failure is logged).
	FreeAllocs(ids []sdk.AllocationID)
}

// Env is a filler's view of the daemon: the Daemon it allocates through
// and the settings it reads, as of the fill's start.
type Env struct {
	Daemon Daemon
	Log    hclog.Logger
	// GPU is the device ordinal (Options.GPU), DeviceUUID the daemon's
	// device (skipped among the siblings), Layout where the node's
	// daemons keep their files (the siblings are found there).
	GPU        int
	DeviceUUID string
	Layout     paths.Layout
	// DigestCache is the user's digest cache (nil: none): what the local
	// files are known to hold, and where digests proven here are stored.
	DigestCache *client.DigestCache
	// Peer configures the cross-node fill (Net).
	Peer PeerOptions
	// Progress, when set, receives the bytes copied of a sibling fill.
	Progress func(done, total uint64)
}

// Job is one file load being filled: its config, checkpoint and plan, and
// the generation's allocation list the filler appends to.
type Job struct {
	Config     cacheconfig.Config
	Checkpoint *safetensors.Checkpoint
	Plan       *plan.Plan
	// Allocs is the generation's allocations: a filler appends every
	// allocation it makes as soon as it exists; the caller frees them on
	// an error.
	Allocs *[]sdk.AllocationID
	// ArenaBytes receives the plan's arena sizes once a cross-node fill
	// allocates (what the generation offers its own peers).
	ArenaBytes *[]uint64
}

// freeAllocs frees the job's allocations and forgets them.
func (j *Job) freeAllocs(d Daemon) {
	d.FreeAllocs(*j.Allocs)
	*j.Allocs = nil
}

// Result is what a successful fill hands the load.
type Result struct {
	// From is GenerationStatus.filled_from: "peer GPU-<uuid>" or
	// "peer HOST:PORT".
	From string
	// Content is the content record of every file of the job's
	// checkpoint, and is TRUE: each carries the local file's Identity
	// because the copy was proven to be that file's bytes — against what
	// the local file is known to hold (the user's digest cache, a trusted
	// hub blob name, or the file hashed alongside the copy:
	// localcontent.go), never the peer's memory or its records alone. A
	// filler that cannot prove a file fails instead. A record's SHA256,
	// when set, is a hub blob name true of that very file (verified by the
	// sibling that loaded it, or the trusted name the copy was proven by):
	// the generation starts with it verified, and its background verifier
	// does not read the file again.
	Content []cacheconfig.FileContent
	// Reserved is what the backend reserved for the job's allocations,
	// summed.
	Reserved uint64
	// Copy is the time of the copy itself, Verify the time spent checking
	// the bytes before returning.
	Copy, Verify time.Duration
	// Path says how the bytes moved, for the log (sdk.PeerCopyStats.Path:
	// "p2p", "staged", "memcpy"; a transport's name).
	Path string
}

// ErrNoPeer is what a filler returns (wrapped) when no peer of its kind
// holds the weights: nothing was tried, so it is not a fallback (Status
// fill_fallback stays "" for it).
var ErrNoPeer = errors.New("no peer holds these weights")

// FilledFromPeerPrefix starts Result.From: "peer GPU-<uuid>" (a sibling
// daemon on the node) and "peer HOST:PORT" (another node's daemon).
const FilledFromPeerPrefix = "peer "

// How a sibling's Status spells what the candidates are chosen by: a
// generation's state (core/daemon's StateServing) and the source of a
// load from files (core/daemon's SourceFiles). core/daemon's tests check
// they are its own spellings.
const (
	StateServing = "serving"
	SourceFiles  = "files"
)

// closeHandleFiles closes the descriptors of handles.
func closeHandleFiles(handles []sdk.Handle) {
	for _, h := range handles {
		if h.File != nil {
			_ = h.File.Close()
		}
	}
}
