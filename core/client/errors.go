package client

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemonfile"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// ErrNoDaemon: no socket exists at the daemon's path. With ErrEmpty it is
// the only error after which a caller may fall back to loading weights from
// disk.
var ErrNoDaemon = errors.New("no wcache daemon")

// ErrEmpty: the daemon runs but holds no weights (it was started without a
// model, evicted, or a publish is in progress). Like ErrNoDaemon, the caller
// loads from disk (and may publish, see Client.Publish). Matched by every
// *EmptyError.
var ErrEmpty = errors.New("no cached weights: load from disk")

// EmptyError: an Attach found the daemon empty (NOT_FOUND with a NoWeights
// detail). It matches ErrEmpty.
type EmptyError struct {
	Socket string
	// Publishing is true while another client publishes into the daemon
	// (PublisherPID); false when it simply holds nothing.
	Publishing   bool
	PublisherPID int32
}

func (e *EmptyError) Error() string {
	if e.Publishing {
		return fmt.Sprintf("daemon at %s: %v (publish in progress by pid %d)", e.Socket, ErrEmpty, e.PublisherPID)
	}
	return fmt.Sprintf("daemon at %s is empty: %v", e.Socket, ErrEmpty)
}

func (e *EmptyError) Unwrap() error { return ErrEmpty }

// ErrUnsafeSocket is matched by every *UnsafeSocketError.
var ErrUnsafeSocket = errors.New("refusing unsafe daemon socket")

// ErrDaemonDead is matched by every *DaemonDeadError.
var ErrDaemonDead = errors.New("daemon socket exists but nobody listens")

// ErrBadManifest: the daemon sent a manifest that does not hold together
// (a tensor outside its handle, an unknown handle index) or that is for
// another device than the one discovered (*DeviceMismatchError).
var ErrBadManifest = errors.New("malformed manifest")

// DeviceMismatchError: the daemon found through a device UUID (ByDeviceUUID,
// or ByOrdinal after resolving) sent a manifest for another device. Its
// memory lives on another GPU, so the manifest is refused. It matches
// ErrBadManifest.
type DeviceMismatchError struct {
	Socket string
	Want   string // the UUID the daemon was discovered by
	Got    string // the manifest's device_uuid
}

func (e *DeviceMismatchError) Error() string {
	return fmt.Sprintf("daemon at %s serves device %q, not %q: refusing another GPU's weights", e.Socket, e.Got, e.Want)
}

func (e *DeviceMismatchError) Unwrap() error { return ErrBadManifest }

// NoDaemonError wraps ErrNoDaemon with the path that was looked up.
// When daemons of other users run on the machine (the caller's socket
// template does not reach them), Others lists them and the message says
// how such a daemon is shared.
type NoDaemonError struct {
	Socket     string
	DeviceUUID string // "" when discovery used an explicit socket path
	Others     []daemonfile.ForeignDaemon
}

func (e *NoDaemonError) Error() string {
	msg := fmt.Sprintf("no wcache daemon: %s does not exist", e.Socket)
	if e.DeviceUUID != "" {
		msg = fmt.Sprintf("no wcache daemon for device %s: %s does not exist", e.DeviceUUID, e.Socket)
	}
	if len(e.Others) == 0 {
		return msg
	}
	others := make([]string, len(e.Others))
	for i, o := range e.Others {
		others[i] = fmt.Sprintf("pid %d (uid %d: %s)", o.PID, o.UID, o.Command())
	}
	uid := uint32(os.Geteuid())
	return fmt.Sprintf("%s; daemons of other users run here: %s — %s", msg, strings.Join(others, ", "), daemonfile.ShareHint(uid))
}

func (e *NoDaemonError) Unwrap() error { return ErrNoDaemon }

// UnsafeSocketError: the socket path exists but must not be trusted.
type UnsafeSocketError struct {
	Socket string
	Reason string // "is a symlink", "is a regular file, not a socket", ...
}

func (e *UnsafeSocketError) Error() string {
	return fmt.Sprintf("refusing daemon socket %s: it %s", e.Socket, e.Reason)
}

func (e *UnsafeSocketError) Unwrap() error { return ErrUnsafeSocket }

// DaemonDeadError: the socket exists but the connection was refused: the
// daemon crashed (or is being killed) and left a stale socket.
type DaemonDeadError struct {
	Socket string
	Err    error
}

func (e *DaemonDeadError) Error() string {
	return fmt.Sprintf("daemon socket %s exists but the connection was refused (%v): the daemon died; "+
		"remove its stale files with `wcache cleanup`", e.Socket, e.Err)
}

func (e *DaemonDeadError) Unwrap() []error { return []error{ErrDaemonDead, e.Err} }

// HandleKindsError: the daemon holds no handle of a kind this client maps
// (Options.HandleKinds), so it refused the attach before a lease existed.
// Daemon lists the kinds it serves, Client those the client said it maps;
// Message is the daemon's, saying what to change.
type HandleKindsError struct {
	Socket         string
	Daemon, Client []string
	Message        string
}

func (e *HandleKindsError) Error() string {
	return fmt.Sprintf("attach to %s: %s", e.Socket, e.Message)
}

// ContentRefusedError: the daemon refused an attach by its content policy
// (FAILED_PRECONDITION with a ContentRefused detail), before a lease
// existed. It unwraps to what the client would have concluded itself:
// a *cacheconfig.ContentMismatchError (REASON_MISMATCH), a
// *cacheconfig.ContentUnknownError (REASON_UNKNOWN, and
// REASON_PROOF_REQUIRED: no files named where the daemon requires them;
// both a miss, load from disk), or ErrPolicyRefused (REASON_POLICY).
type ContentRefusedError struct {
	Socket string
	Reason daemonv1.ContentRefused_Reason
	// Generation and Policies are the matched generation and its content
	// policies; Unproven the files the daemon could not prove
	// (REASON_UNKNOWN); DaemonDigest the daemon's digest of the first of
	// them (its algorithm is the one to hash them in).
	Generation   uint64
	Policies     []cacheconfig.Policy
	Unproven     []string
	DaemonDigest string
	Message      string
	err          error
}

func (e *ContentRefusedError) Error() string {
	return fmt.Sprintf("daemon at %s: %s", e.Socket, e.Message)
}

func (e *ContentRefusedError) Unwrap() error { return e.err }

// contentRefusedFromProto converts the detail of a refused attach.
func contentRefusedFromProto(socket string, cr *daemonv1.ContentRefused, msg string) *ContentRefusedError {
	e := &ContentRefusedError{Socket: socket, Reason: cr.GetReason(), Generation: cr.GetGeneration(),
		Policies: cacheconfig.PoliciesFromStrings(cr.GetPolicies()), Unproven: cr.GetUnproven(), DaemonDigest: cr.GetDaemonDigest(), Message: msg}
	switch cr.GetReason() {
	case daemonv1.ContentRefused_REASON_MISMATCH:
		e.err = &cacheconfig.ContentMismatchError{Name: cr.GetName(), Daemon: cr.GetDaemonDigest(),
			Client: cr.GetClientDigest(), ClientPath: cr.GetClientPath()}
	case daemonv1.ContentRefused_REASON_POLICY:
		e.err = ErrPolicyRefused
	default: // REASON_UNKNOWN, REASON_PROOF_REQUIRED, and reasons added later: not proven
		e.err = &cacheconfig.ContentUnknownError{Name: cr.GetName(), ClientPath: cr.GetClientPath(), Why: msg}
	}
	return e
}
