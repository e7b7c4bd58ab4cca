package daemon

import (
	"fmt"
	"os"
	"slices"
	"strings"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/fdchannel"
)

// PeerClass is how the daemon knows a local peer, from its SO_PEERCRED
// credentials (peercred.go). A peer is in the first class that fits, in
// the order of the constants.
type PeerClass string

const (
	// ClassOwner: the peer runs as the daemon's effective uid.
	ClassOwner PeerClass = "owner"
	// ClassRoot: the peer runs as uid 0 and the daemon does not (a root
	// daemon's root peers are its owner).
	ClassRoot PeerClass = "root"
	// ClassAllowUID: the peer's uid is in --allow-uid.
	ClassAllowUID PeerClass = "allow-uid"
	// ClassAllowGID: the peer's primary gid is in --allow-gid (how a
	// --socket-group member is admitted: the group reaches the socket, the
	// allow-list admits).
	ClassAllowGID PeerClass = "allow-gid"
	// ClassOther: none of the above; refused everything.
	ClassOther PeerClass = "other"
)

// peerClasses are the classes of the table's columns, in their order.
func peerClasses() []PeerClass {
	return []PeerClass{ClassOwner, ClassRoot, ClassAllowUID, ClassAllowGID, ClassOther}
}

// guest reports whether c is admitted to use the daemon without being
// trusted to steer it (docs/operations.md, "Threat model").
func (c PeerClass) guest() bool { return c == ClassAllowUID || c == ClassAllowGID }

// The descriptor channel's operations (fdserver.go) are classified in the
// same table as the gRPC methods, under these names.
const (
	fdOpLease      = "fdchannel/LEASE"
	fdOpPublish    = "fdchannel/PUBLISH"
	fdOpTakeover   = "fdchannel/TAKEOVER"
	fdOpAttachWait = "fdchannel/ATTACH_WAIT"
)

// fdOpName is the table's name of a descriptor channel operation ("" for
// an unknown op, which no row allows).
func fdOpName(op fdchannel.Op) string {
	switch op {
	case fdchannel.OpLease:
		return fdOpLease
	case fdchannel.OpAttachWait:
		return fdOpAttachWait
	case fdchannel.OpPublish:
		return fdOpPublish
	case fdchannel.OpTakeover:
		return fdOpTakeover
	}
	return ""
}

// operation is one row of the authorization table: an operation of the
// daemon's socket or descriptor channel and the peer classes that may
// call it. docs/operations.md, "Who may do what", is the same table
// (authz_test.go compares them).
type operation struct {
	// name is the gRPC full method name, or fdOp* for the descriptor
	// channel.
	name string
	// short is the name refusals and the docs use.
	short string
	// allowed are the classes that may call it; ClassOther never is.
	allowed []PeerClass
	// why explains the row in refusals: what the operation does.
	why string
}

// operations is the authorization table: every RPC of daemon.v1.Daemon
// and every descriptor channel operation (authz_test.go checks that none
// is missing). Guests (--allow-uid, --allow-gid) use a daemon — read its
// status, attach, fetch their own lease's read-only descriptors — and
// never steer it: stopping, evicting, publishing (which also covers the
// sibling fill an attach may start, attachfill.go) and taking over are
// the owner's and root's. A takeover is the owner's alone: the successor
// must be a daemon of the same uid (its files, its allow-lists).
func operations() []operation {
	all := []PeerClass{ClassOwner, ClassRoot, ClassAllowUID, ClassAllowGID}
	steer := []PeerClass{ClassOwner, ClassRoot}
	return []operation{
		{daemonv1.Daemon_Status_FullMethodName, "Status", all, "reads what the daemon holds"},
		{daemonv1.Daemon_Attach_FullMethodName, "Attach", all, "holds a lease on weights"},
		{daemonv1.Daemon_Stop_FullMethodName, "Stop", steer, "ends every lease and the daemon"},
		{daemonv1.Daemon_Publish_FullMethodName, "Publish", steer, "changes what the daemon holds"},
		{daemonv1.Daemon_Evict_FullMethodName, "Evict", steer, "ends leases and frees weights"},
		{fdOpLease, "descriptor channel LEASE", all, "hands out the read-only descriptors of the peer's own lease"},
		{fdOpAttachWait, "descriptor channel ATTACH_WAIT", all, "hands out the read-only descriptors of the lease the peer's own Attach makes"},
		{fdOpPublish, "descriptor channel PUBLISH", steer, "hands out the writable descriptors of the peer's own publish"},
		{fdOpTakeover, "descriptor channel TAKEOVER", []PeerClass{ClassOwner},
			"hands the daemon's writable descriptors to a successor daemon of the same uid"},
	}
}

// lookupOperation finds the row of name.
func lookupOperation(name string) (operation, bool) {
	ops := operations()
	i := slices.IndexFunc(ops, func(o operation) bool { return o.name == name })
	if i < 0 {
		return operation{}, false
	}
	return ops[i], true
}

// classOf classifies peer p of a daemon running as a's ownUID.
func (a authorizer) classOf(p PeerInfo) PeerClass {
	switch {
	case p.UID == a.ownUID:
		return ClassOwner
	case p.UID == 0:
		return ClassRoot
	case slices.Contains(a.allowUIDs, p.UID):
		return ClassAllowUID
	case slices.Contains(a.allowGIDs, p.GID):
		return ClassAllowGID
	}
	return ClassOther
}

// AuthzError is a refusal of authorize: peer P of class Class may not call
// operation Op. Its message names the operation, the class and the peer's
// credentials; the gRPC interceptor sends it as PERMISSION_DENIED, the
// descriptor channel as StatusPermissionDenied.
type AuthzError struct {
	Op    string
	Class PeerClass
	Peer  PeerInfo
	msg   string
}

func (e *AuthzError) Error() string { return e.msg }

// authorize decides whether peer p may call the operation name (a gRPC
// full method name or an fdOp* name): nil, or an *AuthzError. It is the
// one place the daemon decides by peer class; the handlers only check
// that a lease or publish they touch is the peer's own.
func (a authorizer) authorize(name string, p PeerInfo) error {
	class := a.classOf(p)
	op, ok := lookupOperation(name)
	if !ok {
		return &AuthzError{Op: name, Class: class, Peer: p,
			msg: fmt.Sprintf("operation %q is not in the daemon's authorization table: refused to every peer", name)}
	}
	if slices.Contains(op.allowed, class) {
		return nil
	}
	e := &AuthzError{Op: op.short, Class: class, Peer: p}
	if class == ClassOther {
		// Begins as it always did: clients and tests look for "peer uid N".
		e.msg = fmt.Sprintf("peer uid %d (gid %d, pid %d) may not use this daemon (%s refused, class %s): it serves uid %d only; "+
			"allow more with `wcache serve --allow-uid`/`--allow-gid`", p.UID, p.GID, p.PID, op.short, class, a.ownUID)
		return e
	}
	names := make([]string, len(op.allowed))
	for i, c := range op.allowed {
		names[i] = string(c)
	}
	what := "a guest (" + string(class) + ")"
	if !class.guest() {
		what = string(class)
	}
	e.msg = fmt.Sprintf("%s refused: peer uid %d (gid %d, pid %d) is %s of this daemon (uid %d): %s is for %s only (it %s; docs/operations.md, \"Who may do what\")",
		op.short, p.UID, p.GID, p.PID, what, a.ownUID, op.short, strings.Join(names, ", "), op.why)
	return e
}

// authorizer is the daemon's authorizer (its effective uid and
// allow-lists), for the gRPC interceptors and the descriptor channel.
func (d *Daemon) authorizer() authorizer {
	return authorizer{ownUID: uint32(os.Geteuid()), allowUIDs: d.opts.AllowUIDs, allowGIDs: d.opts.AllowGIDs}
}
