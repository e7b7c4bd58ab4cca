package daemon

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// An attach answer is the same manifest for every lease of a generation but
// its lease id. Marshalling the whole manifest on every attach would make an
// attach cost grow with the tensor count (21 ms of CPU at 100k tensors,
// 290 ms at 1M), so the manifest is marshalled once per generation, without
// a lease id, and each attach sends those shared bytes framed by a few
// bytes of its own: the AttachEvent tag and length in front, the lease_id
// field behind. Protobuf decoders take fields in any order, so the bytes on
// the wire decode to exactly the AttachEvent forLease builds.

// preEncoded is a message already in its wire form; wireCodec sends it as
// is. Its frames are never changed once built, and the shared part is
// never freed (mem.SliceBuffer's Free does nothing).
type preEncoded struct {
	frames mem.BufferSlice
}

// wireCodec is the daemon's gRPC codec: the proto codec, except that a
// *preEncoded message is sent as its frames without marshalling.
type wireCodec struct {
	proto encoding.CodecV2
}

// newWireCodec wraps gRPC's registered proto codec.
func newWireCodec() wireCodec { return wireCodec{proto: encoding.GetCodecV2("proto")} }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(*preEncoded); ok {
		return p.frames, nil
	}
	return c.proto.Marshal(v)
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c wireCodec) Name() string { return c.proto.Name() }

// encoded returns the manifest marshalled without a lease id, built on the
// first call (the first attach of the generation). A Publish finishes
// editing the manifest (layouts, metadata) before it installs it, so the
// bytes are built from the final messages.
func (m *manifest) encoded() ([]byte, error) {
	m.once.Do(func() {
		m.wire, m.wireErr = proto.MarshalOptions{Deterministic: true}.Marshal(m.forLease(0).GetManifest())
		if m.wireErr != nil {
			m.wireErr = fmt.Errorf("marshal the manifest: %w", m.wireErr)
		}
	})
	return m.wire, m.wireErr
}

// leaseEvent is forLease(leaseID) in its wire form, sharing the manifest's
// bytes: what an attach costs does not grow with the tensor count.
func (m *manifest) leaseEvent(leaseID uint64) (*preEncoded, error) {
	body, err := m.encoded()
	if err != nil {
		return nil, err
	}
	eventFields := (*daemonv1.AttachEvent)(nil).ProtoReflect().Descriptor().Fields()
	manifestFields := (*daemonv1.Manifest)(nil).ProtoReflect().Descriptor().Fields()
	var tail []byte
	if leaseID != 0 {
		tail = protowire.AppendTag(tail, manifestFields.ByName("lease_id").Number(), protowire.VarintType)
		tail = protowire.AppendVarint(tail, leaseID)
	}
	head := protowire.AppendTag(nil, eventFields.ByName("manifest").Number(), protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(body)+len(tail)))
	return &preEncoded{frames: mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(body), mem.SliceBuffer(tail)}}, nil
}
