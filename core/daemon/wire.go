package daemon

import (
	"fmt"
	"sync"

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

// encoded returns the manifest marshalled without a lease id, with its
// tensors as Manifest.tensors or, with table (the client decodes it), as a
// TensorTable when the tensors fit one (no layouts). Each form is built on
// its first use in the generation. A Publish finishes editing the manifest
// (layouts, metadata) before it installs it, so the bytes are built from
// the final messages.
func (m *manifest) encoded(table bool) ([]byte, error) {
	w := &m.wire[0]
	if table {
		w = &m.wire[1]
	}
	w.once.Do(func() {
		msg := m.forLease(0).GetManifest()
		msg.FileSha256 = nil // verified later: each lease's tail carries them
		if table {
			if t, ok := daemonv1.NewTensorTable(m.tensors); ok {
				msg.Tensors, msg.TensorTable = nil, t
			}
		}
		w.bytes, w.err = proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if w.err != nil {
			w.err = fmt.Errorf("marshal the manifest: %w", w.err)
		}
	})
	return w.bytes, w.err
}

// wireForm is one marshalled form of a manifest.
type wireForm struct {
	once  sync.Once
	bytes []byte
	err   error
}

// leaseEvent is forLease(leaseID), plus token as fd_token when the manifest
// has descriptor handles, with the hub blob names verified by now, in its wire form (with table: the
// tensors as a TensorTable where they fit one), sharing the manifest's
// bytes: what an attach costs does not grow with the tensor count.
func (m *manifest) leaseEvent(leaseID uint64, token []byte, table bool) (*preEncoded, error) {
	body, err := m.encoded(table)
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
	for _, s := range m.blobs.list() {
		// The hub blob names verified by now (hubblob.go), after the body.
		b, err := proto.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("marshal the manifest: %w", err)
		}
		tail = protowire.AppendTag(tail, manifestFields.ByName("file_sha256").Number(), protowire.BytesType)
		tail = protowire.AppendBytes(tail, b)
	}
	if m.files != nil && len(token) > 0 {
		// The lease's descriptor channel secret, only with descriptors.
		tail = protowire.AppendTag(tail, manifestFields.ByName("fd_token").Number(), protowire.BytesType)
		tail = protowire.AppendBytes(tail, token)
	}
	head := protowire.AppendTag(nil, eventFields.ByName("manifest").Number(), protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(body)+len(tail)))
	return &preEncoded{frames: mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(body), mem.SliceBuffer(tail)}}, nil
}
