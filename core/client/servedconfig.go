package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// ServedConfig is Status(ctx).Config: the config of the generation the
// daemon serves (the zero Config when it serves none), read from the same
// Status call but decoding that one field of the answer. The rest (leases,
// generations, their files and digests) is skipped undecoded: in a fresh
// process, decoding a whole StatusResponse first builds the protobuf tables
// of every message type it holds, which made the config look-up of
// `wcache attach` (the device capability) its costliest step after the
// attach itself. Errors are Status's.
func (c *Client) ServedConfig(ctx context.Context) (cacheconfig.Config, error) {
	var answer rawAnswer
	err := c.conn.Invoke(ctx, daemonv1.Daemon_Status_FullMethodName, &daemonv1.StatusRequest{}, &answer,
		grpc.ForceCodecV2(rawAnswerCodec{proto: encoding.GetCodecV2("proto")}))
	if err != nil {
		return cacheconfig.Config{}, fmt.Errorf("status of %s: %w", c.socket, err)
	}
	cfg, err := statusConfig(answer.b)
	if err != nil {
		return cacheconfig.Config{}, fmt.Errorf("status of %s: %w", c.socket, err)
	}
	if cfg == nil {
		return cacheconfig.Config{}, nil
	}
	return cacheconfig.FromProto(cfg), nil
}

// statusConfigField is StatusResponse.config's field number (daemon.proto),
// written here because asking the descriptor would decode daemon.proto's
// whole descriptor set, the cost ServedConfig avoids;
// TestStatusConfigFieldIsTheProtos checks it.
const statusConfigField protowire.Number = 5

// statusConfig decodes StatusResponse.config out of a marshalled
// StatusResponse, as proto.Unmarshal would (occurrences merged, nil when
// absent), checking that every other field is well-formed without decoding
// it.
func statusConfig(b []byte) (*configv1.CacheConfig, error) {
	var cfg *configv1.CacheConfig
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, fmt.Errorf("malformed status answer: %w", protowire.ParseError(l))
		}
		b = b[l:]
		if n != statusConfigField || typ != protowire.BytesType {
			// Another field, or the config's number with another wire
			// type, which proto.Unmarshal keeps as an unknown field.
			if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
				return nil, fmt.Errorf("malformed status answer: field %d: %w", n, protowire.ParseError(l))
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return nil, fmt.Errorf("malformed status answer: config: %w", protowire.ParseError(l))
		}
		b = b[l:]
		if cfg == nil {
			cfg = &configv1.CacheConfig{}
		}
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, cfg); err != nil {
			return nil, fmt.Errorf("malformed status answer: config: %w", err)
		}
	}
	return cfg, nil
}

// rawAnswer is an answer kept in its wire form.
type rawAnswer struct{ b []byte }

// rawAnswerCodec is gRPC's proto codec, except that an answer received into
// a *rawAnswer is kept as its bytes. Its name is the proto codec's, so the
// call's content type is unchanged.
type rawAnswerCodec struct {
	proto encoding.CodecV2
}

func (c rawAnswerCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c rawAnswerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawAnswer); ok {
		r.b = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (c rawAnswerCodec) Name() string { return c.proto.Name() }
