package daemon

import "github.com/wcache/wcache/core/daemon/registry"

// The generations, leases and publishes the daemon holds live in
// core/daemon/registry; these names are the daemon's view of them (the
// registry keeps the daemon's manifests and publish descriptors opaque).
type (
	generation = registry.Generation[*manifest, *handleFiles]
	lease      = registry.Lease[*manifest, *handleFiles]
	publisher  = registry.Publisher[*manifest, *handleFiles]
	holdings   = registry.Registry[*manifest, *handleFiles]
	statusView = registry.StatusView[*manifest, *handleFiles]
)

// State is the daemon's serving state, or a generation's (publishing,
// serving, draining); see registry.State.
type State = registry.State

// The states (registry.State).
const (
	StateServing    State = registry.StateServing
	StateDraining   State = registry.StateDraining
	StateStopping   State = registry.StateStopping
	StateEmpty      State = registry.StateEmpty
	StatePublishing State = registry.StatePublishing
)

// GenerationInfo describes one generation the daemon holds.
type GenerationInfo = registry.GenerationInfo

// LoadStats measure the load of a generation (registry.LoadStats).
type LoadStats = registry.LoadStats

// ConflictReason says why a Publish or an Evict was refused because of
// the daemon's state (registry.ConflictReason).
type ConflictReason = registry.ConflictReason

// The reasons of a *PublishConflictError (registry.ConflictInProgress, …).
const ConflictInProgress, ConflictHoldsWeights, ConflictBusy = registry.ConflictInProgress,
	registry.ConflictHoldsWeights, registry.ConflictBusy

// PublishConflictError refuses a Publish (or an Evict) that the daemon's
// state does not allow (registry.PublishConflictError). It travels as the
// PublishConflict detail.
type PublishConflictError = registry.PublishConflictError

// SelectError refuses an evict whose selector names no generation
// (registry.SelectError).
type SelectError = registry.SelectError

// procOf is p as the registry records a lease's or a publish's process.
func procOf(p PeerInfo) registry.Peer { return registry.Peer{PID: p.PID, UID: p.UID} }

// Generations describes every generation the daemon holds, oldest first.
func (d *Daemon) Generations() []GenerationInfo { return d.reg.Generations() }

// HeldBytes is the device memory the daemon holds: every generation's
// arenas (as the backend reported their sizes), a publish in progress
// included.
func (d *Daemon) HeldBytes() uint64 { return d.reg.Held() }
