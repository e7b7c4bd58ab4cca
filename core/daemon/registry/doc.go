// Package registry holds what a daemon holds: its generations (sets of
// weights, each with its config, arenas, manifest and state), the leases
// attached to them, and the state machine a generation goes through —
// published (BeginPublish, FinishPublish, AbortPublish), serving, drained
// by an evict (SelectForEvict, BeginEvict, EndEvict) or by a Stop
// (BeginDrain, EndDrain, Stop) — and the daemon's state derived from
// theirs (StateEmpty, StatePublishing, StateServing, StateDraining,
// StateStopping).
//
// One lock guards it all. Every operation takes it itself; a callback an
// operation is given (MatchAttach's answers, ForEachServing's function,
// Status's view, …) runs under it, so that the daemon's work on a
// generation and the registry's state are one critical section. Every
// state change wakes the waiters (WaitEmpty) and reports the lease count
// and the state to the Metrics given by SetMetrics.
//
// The registry is generic in what the daemon hangs on a generation and
// never looks into: M, the daemon's manifest (what an attach is sent), and
// F, the descriptors a publisher fetches. It knows nothing of gRPC, the
// backend or the files; core/daemon turns its outcomes into statuses
// (AttachAnswers) and converts its types to protobuf (toproto.go there).
package registry
