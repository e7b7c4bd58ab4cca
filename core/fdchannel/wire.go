// Package fdchannel is the daemon's descriptor channel: a SOCK_SEQPACKET
// Unix socket beside the daemon's gRPC socket (Path) on which a client
// holding a lease receives the descriptors of its manifest's descriptor
// handles (memfd, cuda-vmm-fd) with SCM_RIGHTS. This package holds the
// wire format (docs/protocol.md, "Descriptor channel", byte by byte) and
// the client side (Fetch); core/daemon serves it.
package fdchannel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Suffix is appended to the daemon's socket path to name its descriptor
// channel: same directory, same mode (0600) and peer-credential rules.
const Suffix = ".fd"

// Path is the descriptor channel of the daemon listening on socket.
func Path(socket string) string { return socket + Suffix }

// Magic opens every message; Version is the protocol version.
const (
	Magic   = "WCFD"
	Version = 1
)

// Op is what a request asks for.
type Op uint16

const (
	// OpLease: the read-only descriptors of a lease's manifest. ID is the
	// Manifest's lease_id, Token its fd_token.
	OpLease Op = 1
	// OpPublish: the writable descriptors of a publish in progress. ID is
	// the PublishPlan's publish_id, Token its fd_token.
	OpPublish Op = 2
	// OpTakeover: the daemon's own (writable) descriptors, for a successor
	// daemon of the same uid that takes the memory over (serve --takeover).
	// ID is the lease id of the successor's own attach, Token its fd_token.
	OpTakeover Op = 3
	// OpAttachWait: the read-only descriptors of the lease that the
	// client's Attach, sent after this request, makes. ID is 0, Token the
	// AttachRequest's fd_wait_token (random, the client's own). The daemon
	// answers once that Attach has a lease (as OpLease) or failed
	// (StatusNoLease), so the descriptors travel while the manifest does,
	// instead of in a second exchange after it.
	OpAttachWait Op = 4
)

func (o Op) String() string {
	switch o {
	case OpLease:
		return "lease"
	case OpPublish:
		return "publish"
	case OpTakeover:
		return "takeover"
	case OpAttachWait:
		return "attach-wait"
	}
	return fmt.Sprintf("op %d", uint16(o))
}

// Status is the daemon's answer to a request.
type Status uint16

const (
	StatusOK Status = 0
	// StatusBadRequest: the request is malformed (size, magic, version, op).
	StatusBadRequest Status = 1
	// StatusPermissionDenied: the peer's uid may not use the daemon, or is
	// not the uid of the lease (or, for a takeover, not the daemon's own).
	StatusPermissionDenied Status = 2
	// StatusNoLease: no live lease (or publish) has this id: never had, or
	// it ended.
	StatusNoLease Status = 3
	// StatusBadToken: the token is not the lease's.
	StatusBadToken Status = 4
	// StatusUnavailable: the daemon cannot answer now (stopping, no
	// descriptors held).
	StatusUnavailable Status = 5
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBadRequest:
		return "bad request"
	case StatusPermissionDenied:
		return "permission denied"
	case StatusNoLease:
		return "no such lease"
	case StatusBadToken:
		return "wrong token"
	case StatusUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("status %d", uint16(s))
}

// Sizes of the messages.
const (
	TokenSize      = 32
	RequestSize    = 48
	ReplyHeader    = 16
	MaxMessage     = 1024
	DescriptorSize = 24
	// kindDescriptor marks a descriptor message (bytes 6-7).
	kindDescriptor = 0x10
)

// ErrMalformed: a message does not follow the wire format.
var ErrMalformed = errors.New("malformed descriptor channel message")

// Request is a client's one message:
//
//	0  4  magic "WCFD"
//	4  2  version, little-endian (1)
//	6  2  op, little-endian
//	8  8  id (lease or publish id), little-endian
//	16 32 token
type Request struct {
	Op    Op
	ID    uint64
	Token [TokenSize]byte
}

// Marshal encodes r in its RequestSize bytes.
func (r Request) Marshal() []byte {
	b := make([]byte, RequestSize)
	copy(b, Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], uint16(r.Op))
	binary.LittleEndian.PutUint64(b[8:], r.ID)
	copy(b[16:], r.Token[:])
	return b
}

// ParseRequest decodes a request; anything but RequestSize bytes with the
// magic, version 1 and a known op is ErrMalformed.
func ParseRequest(b []byte) (Request, error) {
	if len(b) != RequestSize {
		return Request{}, fmt.Errorf("%w: request of %d bytes, want %d", ErrMalformed, len(b), RequestSize)
	}
	if err := checkHead(b); err != nil {
		return Request{}, err
	}
	r := Request{Op: Op(binary.LittleEndian.Uint16(b[6:])), ID: binary.LittleEndian.Uint64(b[8:])}
	if r.Op != OpLease && r.Op != OpPublish && r.Op != OpTakeover && r.Op != OpAttachWait {
		return Request{}, fmt.Errorf("%w: unknown op %d", ErrMalformed, uint16(r.Op))
	}
	copy(r.Token[:], b[16:])
	return r, nil
}

// Reply is the daemon's first answer:
//
//	0  4  magic "WCFD"
//	4  2  version (1)
//	6  2  status
//	8  4  count: descriptor messages that follow (0 unless status is 0)
//	12 4  message length n (at most 1024)
//	16 n  message, UTF-8 (why a request was refused; may be empty)
type Reply struct {
	Status  Status
	Count   uint32
	Message string
}

// Marshal encodes r; a longer message is cut to MaxMessage bytes at a
// UTF-8 boundary.
func (r Reply) Marshal() []byte {
	msg := r.Message
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage]
		for len(msg) > 0 && !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	b := make([]byte, ReplyHeader+len(msg))
	copy(b, Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], uint16(r.Status))
	binary.LittleEndian.PutUint32(b[8:], r.Count)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(msg)))
	copy(b[ReplyHeader:], msg)
	return b
}

// ParseReply decodes a reply.
func ParseReply(b []byte) (Reply, error) {
	if len(b) < ReplyHeader {
		return Reply{}, fmt.Errorf("%w: reply of %d bytes", ErrMalformed, len(b))
	}
	if err := checkHead(b); err != nil {
		return Reply{}, err
	}
	n := binary.LittleEndian.Uint32(b[12:])
	if n > MaxMessage || int(n) != len(b)-ReplyHeader {
		return Reply{}, fmt.Errorf("%w: reply message of %d bytes in a %d-byte reply", ErrMalformed, n, len(b))
	}
	return Reply{Status: Status(binary.LittleEndian.Uint16(b[6:])), Count: binary.LittleEndian.Uint32(b[8:]),
		Message: string(b[ReplyHeader:])}, nil
}

// DescriptorHeader is one descriptor message, with exactly one descriptor
// in its SCM_RIGHTS control message:
//
//	0  4  magic "WCFD"
//	4  2  version (1)
//	6  2  kind 0x10 (a descriptor)
//	8  4  handle index in the manifest (or publish plan)
//	12 4  reserved, 0
//	16 8  size of the handle in bytes
type DescriptorHeader struct {
	Handle uint32
	Size   uint64
}

// Marshal encodes d in its DescriptorSize bytes.
func (d DescriptorHeader) Marshal() []byte {
	b := make([]byte, DescriptorSize)
	copy(b, Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], kindDescriptor)
	binary.LittleEndian.PutUint32(b[8:], d.Handle)
	binary.LittleEndian.PutUint64(b[16:], d.Size)
	return b
}

// ParseDescriptor decodes a descriptor message's bytes.
func ParseDescriptor(b []byte) (DescriptorHeader, error) {
	if len(b) != DescriptorSize {
		return DescriptorHeader{}, fmt.Errorf("%w: descriptor message of %d bytes", ErrMalformed, len(b))
	}
	if err := checkHead(b); err != nil {
		return DescriptorHeader{}, err
	}
	if k := binary.LittleEndian.Uint16(b[6:]); k != kindDescriptor {
		return DescriptorHeader{}, fmt.Errorf("%w: message kind %#x, want a descriptor (%#x)", ErrMalformed, k, kindDescriptor)
	}
	return DescriptorHeader{Handle: binary.LittleEndian.Uint32(b[8:]), Size: binary.LittleEndian.Uint64(b[16:])}, nil
}

func checkHead(b []byte) error {
	if !bytes.Equal(b[:4], []byte(Magic)) {
		return fmt.Errorf("%w: magic %q", ErrMalformed, b[:4])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return fmt.Errorf("%w: version %d, this side speaks %d", ErrMalformed, v, Version)
	}
	return nil
}

// AckSize is the size of each message of the takeover exchange that
// follows the descriptors of op TAKEOVER on the same connection
// (docs/protocol.md, "Takeover"):
//
//	successor -> daemon  kind 0x20 (imported): every descriptor imported
//	daemon -> successor  kind 0x21 (released): the daemon stopped accepting,
//	                     removed its socket, channel and ready file and
//	                     released its identity lock; it keeps its memory,
//	                     its process and its leases
//	successor -> daemon  kind 0x22 (serving): the successor holds the lock,
//	                     listens and wrote its ready file
//
// Only after "serving" does the daemon end its leases (HandoverMessage)
// and exit. A successor that closes, dies, sends anything else or stays
// silent before it leaves the daemon serving (after "released", it takes
// its lock back and listens again). Each message is:
//
//	0  4  magic "WCFD"
//	4  2  version (1)
//	6  2  kind
const AckSize = 8

// AckKind is the kind of a takeover-exchange message (bytes 6-7).
type AckKind uint16

// The kinds of the takeover exchange, in their order.
const (
	AckImported AckKind = 0x20
	AckReleased AckKind = 0x21
	AckServing  AckKind = 0x22
)

func (k AckKind) String() string {
	switch k {
	case AckImported:
		return "imported"
	case AckReleased:
		return "released"
	case AckServing:
		return "serving"
	}
	return fmt.Sprintf("kind %#x", uint16(k))
}

// MarshalAck encodes a takeover-exchange message of kind k.
func MarshalAck(k AckKind) []byte {
	b := make([]byte, AckSize)
	copy(b, Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], uint16(k))
	return b
}

// ParseAck checks that b is the takeover-exchange message of kind want;
// anything else is ErrMalformed.
func ParseAck(b []byte, want AckKind) error {
	if len(b) != AckSize {
		return fmt.Errorf("%w: %s message of %d bytes, want %d", ErrMalformed, want, len(b), AckSize)
	}
	if err := checkHead(b); err != nil {
		return err
	}
	if k := AckKind(binary.LittleEndian.Uint16(b[6:])); k != want {
		return fmt.Errorf("%w: message %s, want %s (%#x)", ErrMalformed, k, want, uint16(want))
	}
	return nil
}

// MarshalImported encodes the successor's "imported" (MarshalAck).
func MarshalImported() []byte { return MarshalAck(AckImported) }

// ParseImported checks a successor's "imported" (ParseAck).
func ParseImported(b []byte) error { return ParseAck(b, AckImported) }

// HandoverMessage is in the status message (UNAVAILABLE) with which a
// daemon that handed its memory over to a successor ends every lease:
// clients then re-attach to the successor, which serves the same
// generation, instead of treating the weights as gone (core/client.Lease).
const HandoverMessage = "handed its memory over to a successor"
