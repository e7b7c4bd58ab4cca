package daemon

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/fdpass"
)

// fdRequestTimeout bounds one descriptor channel connection: a client that
// connects and says nothing cannot hold a goroutine.
const fdRequestTimeout = 5 * time.Second

// attachWaitMargin is what an ATTACH_WAIT request leaves of its
// connection's fdRequestTimeout when it stops waiting for its Attach, so
// that the refusal still goes out.
const attachWaitMargin = time.Second

// listenFDChannel listens on the descriptor channel beside the daemon's
// socket (fdchannel.Path), with the socket's mode and group.
func (d *Daemon) listenFDChannel() (*net.UnixListener, error) {
	l, err := listenUnix("unixpacket", fdchannel.Path(d.info.Paths.Socket), d.opts.SocketGID)
	if err != nil {
		return nil, fmt.Errorf("descriptor channel: %w", err)
	}
	return l, nil
}

// serveFDChannel answers descriptor channel connections, one request each,
// until l is closed. The connections get the gRPC socket's limits
// (connlimit.go): at most maxConnsPerUID open per allowed uid, and
// maxDeniedConnsPerUID per denied uid, each closed after
// deniedConnLifetime; more are closed at accept.
func (d *Daemon) serveFDChannel(l *net.UnixListener) {
	auth := d.authorizer()
	lis := newPeerListener(l, auth.allows, d.log)
	var backoff time.Duration
	for {
		c, err := lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors (EMFILE, ENFILE) or a connection that
			// went away before accept: the channel must outlive it, as
			// net/http's server does, or every later lease would find
			// it deaf.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			d.log.Warn("descriptor channel: accept", "error", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		go d.answerFDRequest(c.(*peerConn))
	}
}

// answerFDRequest checks the peer and the request, and answers with the
// reply and, when it is OK, the descriptors (docs/protocol.md, "Descriptor
// channel"). Every refusal is logged with the peer. The daemon closes
// after the peer (awaitPeerClose).
func (d *Daemon) answerFDRequest(pc *peerConn) {
	defer pc.Close()
	c := pc.Conn.(*net.UnixConn)
	deadline := time.Now().Add(fdRequestTimeout)
	_ = c.SetDeadline(deadline)
	p := pc.info
	buf := make([]byte, fdchannel.RequestSize+1)
	n, files, err := fdpass.Recv(c, buf, 0)
	for _, f := range files {
		_ = f.Close()
	}
	var req fdchannel.Request
	if err == nil {
		req, err = fdchannel.ParseRequest(buf[:n])
	}
	var descs []fdchannel.Descriptor
	reply := fdchannel.Reply{Status: fdchannel.StatusBadRequest}
	if err != nil {
		reply.Message = err.Error()
	} else {
		descs, reply = d.fdAnswer(p, req, deadline.Add(-attachWaitMargin))
	}
	defer fdchannel.CloseAll(descs) // duplicates: the daemon keeps its own
	// An ATTACH_WAIT without a lease is its Attach's failure (which says
	// why itself), and one left unread a manifest without descriptor
	// handles: debug. Its other refusals (class, uid) are logged as any.
	refused, lost := d.log.Info, d.log.Warn
	if req.Op == fdchannel.OpAttachWait {
		lost = d.log.Debug
		if reply.Status == fdchannel.StatusNoLease {
			refused = d.log.Debug
		}
	}
	if reply.Status != fdchannel.StatusOK {
		refused("descriptor channel: request refused", "op", req.Op.String(), "id", req.ID, "pid", p.PID, "uid", p.UID,
			"status", reply.Status.String(), "reason", reply.Message)
		if fdpass.Send(c, reply.Marshal()) == nil {
			awaitPeerClose(c)
		}
		return
	}
	reply.Count = uint32(len(descs))
	if err := fdpass.Send(c, reply.Marshal()); err != nil {
		lost("descriptor channel: reply", "pid", p.PID, "error", err)
		return
	}
	for _, ds := range descs {
		h := fdchannel.DescriptorHeader{Handle: ds.Handle, Size: ds.Size}
		if err := fdpass.Send(c, h.Marshal(), ds.File); err != nil {
			d.log.Warn("descriptor channel: send descriptor", "pid", p.PID, "handle", ds.Handle, "error", err)
			return
		}
	}
	d.log.Debug("descriptor channel: descriptors sent", "op", req.Op.String(), "id", req.ID, "pid", p.PID, "count", len(descs))
	if req.Op == fdchannel.OpTakeover {
		d.awaitSuccessor(c, p)
		return
	}
	awaitPeerClose(c)
}

// awaitPeerClose waits, until the connection's deadline, for the peer to
// close after the daemon's last message. Closing first would race the
// peer's read of that message: Linux may answer a non-blocking
// SOCK_SEQPACKET read that found the queue empty with EOF once the peer
// has shut down, although the message was queued meanwhile (the rare
// "read unixpacket: EOF" of an attach under 64 concurrent clients).
// Whatever the peer sends meanwhile is discarded.
func awaitPeerClose(c *net.UnixConn) {
	var b [1]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
	}
}

// fdAnswer decides a well-formed request of peer p: the descriptors to send,
// or a refusal. The descriptors stay the daemon's (Send duplicates them into
// the peer). An ATTACH_WAIT waits for its Attach until waitUntil.
func (d *Daemon) fdAnswer(p PeerInfo, req fdchannel.Request, waitUntil time.Time) ([]fdchannel.Descriptor, fdchannel.Reply) {
	// The peer's class may call the op (authz.go); below, only that the
	// lease or publish is the peer's own.
	if err := d.authorizer().authorize(fdOpName(req.Op), p); err != nil {
		st := fdchannel.StatusPermissionDenied
		if fdOpName(req.Op) == "" {
			st = fdchannel.StatusBadRequest
		}
		return nil, fdchannel.Reply{Status: st, Message: err.Error()}
	}
	switch req.Op {
	case fdchannel.OpAttachWait:
		if req.ID != 0 {
			return nil, fdchannel.Reply{Status: fdchannel.StatusBadRequest, Message: fmt.Sprintf("op %s takes id 0, not %d", req.Op, req.ID)}
		}
		l, why := d.attachWaits.await(req.Token, time.Until(waitUntil))
		switch {
		case l == nil:
			return nil, fdchannel.Reply{Status: fdchannel.StatusNoLease, Message: why}
		case l.Peer.UID != p.UID:
			return nil, fdchannel.Reply{Status: fdchannel.StatusPermissionDenied,
				Message: fmt.Sprintf("lease %d belongs to uid %d, the request comes from uid %d", l.ID, l.Peer.UID, p.UID)}
		case d.reg.Lookup(l.ID) == nil:
			return nil, fdchannel.Reply{Status: fdchannel.StatusNoLease, Message: fmt.Sprintf("lease %d ended before its descriptors were sent", l.ID)}
		}
		return descriptorsReply(l.Manifest.files.descriptors(false))
	case fdchannel.OpLease, fdchannel.OpTakeover:
		l := d.reg.Lookup(req.ID)
		if l == nil {
			return nil, fdchannel.Reply{Status: fdchannel.StatusNoLease,
				Message: fmt.Sprintf("no open lease %d: attach first, and keep the lease open while fetching", req.ID)}
		}
		if l.Peer.UID != p.UID {
			return nil, fdchannel.Reply{Status: fdchannel.StatusPermissionDenied,
				Message: fmt.Sprintf("lease %d belongs to uid %d, the request comes from uid %d", req.ID, l.Peer.UID, p.UID)}
		}
		if subtle.ConstantTimeCompare(l.Token[:], req.Token[:]) != 1 {
			return nil, fdchannel.Reply{Status: fdchannel.StatusBadToken, Message: fmt.Sprintf("not the fd_token of lease %d", req.ID)}
		}
		if req.Op == fdchannel.OpLease {
			return descriptorsReply(l.Manifest.files.descriptors(false))
		}
		// A takeover gets the writable descriptors: the table lets only
		// the daemon's own uid serve the memory on.
		return d.takeoverDescriptors(l)
	case fdchannel.OpPublish:
		pub, files := d.reg.PublishFor(req.ID)
		switch {
		case pub == nil:
			return nil, fdchannel.Reply{Status: fdchannel.StatusNoLease, Message: fmt.Sprintf("no publish %d in progress", req.ID)}
		case pub.Peer.UID != p.UID:
			return nil, fdchannel.Reply{Status: fdchannel.StatusPermissionDenied,
				Message: fmt.Sprintf("publish %d belongs to uid %d, the request comes from uid %d", req.ID, pub.Peer.UID, p.UID)}
		case subtle.ConstantTimeCompare(pub.Token[:], req.Token[:]) != 1:
			return nil, fdchannel.Reply{Status: fdchannel.StatusBadToken, Message: fmt.Sprintf("not the fd_token of publish %d", req.ID)}
		}
		return descriptorsReply(files.descriptors(true))
	}
	return nil, fdchannel.Reply{Status: fdchannel.StatusBadRequest, Message: "unknown op"}
}

// takeoverDescriptors answers a successor's takeover request (lease l is
// one of the successor's own attaches): the writable descriptors of every
// generation, generation after generation in id order, each in handle
// order; answerFDRequest then hands over (awaitSuccessor). The successor must
// hold a lease (same pid) on every generation, and every generation must
// serve with descriptor handles only: else nothing is sent.
func (d *Daemon) takeoverDescriptors(l *lease) ([]fdchannel.Descriptor, fdchannel.Reply) {
	var out []fdchannel.Descriptor
	var reply fdchannel.Reply
	refuse := func(format string, args ...any) bool {
		fdchannel.CloseAll(out)
		out, reply = nil, fdchannel.Reply{Status: fdchannel.StatusUnavailable, Message: fmt.Sprintf(format, args...)}
		return false
	}
	d.reg.EachByID(l.Peer, func(g *generation, leased bool) bool {
		switch {
		case g.State != StateServing:
			return refuse("generation %d is %s: no takeover until it serves or is gone", g.ID, g.State)
		case !leased:
			return refuse("the successor (pid %d) holds no lease on generation %d: attach to every generation first", l.Peer.PID, g.ID)
		}
		if n := g.Manifest.files.count(); n == 0 || n != len(g.Manifest.handles) {
			return refuse("generation %d: this daemon's handles are names, not descriptors: its memory cannot change hands", g.ID)
		}
		ds, err := g.Manifest.files.descriptors(true)
		if err != nil {
			return refuse("generation %d: %v", g.ID, err)
		}
		out = append(out, ds...)
		return true
	})
	return out, reply
}

// descriptorsReply turns descriptors' result into fdAnswer's.
func descriptorsReply(ds []fdchannel.Descriptor, err error) ([]fdchannel.Descriptor, fdchannel.Reply) {
	if err != nil {
		return nil, fdchannel.Reply{Status: fdchannel.StatusUnavailable, Message: err.Error()}
	}
	return ds, fdchannel.Reply{}
}
