package client

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/cacheconfig"
)

// TestServedConfigIsStatusConfig: ServedConfig returns what Status reports
// as Config, for an answer carrying every kind of field around the config
// (before and after it, repeated and nested ones) and for one without a
// config; a daemon's error is Status's.
func TestServedConfigIsStatusConfig(t *testing.T) {
	full := func() *daemonv1.StatusResponse {
		cfg := &configv1.CacheConfig{Model: "/m", CheckpointDigest: "sha256:ab", TpSize: 2, TpRank: 1,
			DeviceCapability: "sm_90", Extra: map[string]string{"k": "v"}, ProtocolVersion: 3}
		return &daemonv1.StatusResponse{Pid: 7, DeviceUuid: "GPU-x", Backend: "mock", Model: "/m", Config: cfg,
			ConfigDigest: "sha256:cd", Generation: 4, State: "serving", Metadata: map[string]string{"a": "b"},
			Leases:      []*daemonv1.Lease{{Id: 3, Pid: 9, ClientName: "c"}},
			StartPhases: &daemonv1.StartPhases{LoadNs: 5, Source: "files"},
			Files:       []*daemonv1.FileContent{{Name: "a.safetensors", Digest: "blake3-tree-1m:00"}},
			Generations: []*daemonv1.GenerationStatus{{Generation: 4, Model: "/m", Config: cfg,
				Files: []*daemonv1.FileContent{{Name: "a.safetensors"}}}},
			ContentPolicies: []string{"identity", "hash"}, MaxBytes: 1 << 30}
	}
	cases := map[string]func() *daemonv1.StatusResponse{
		"full":      full,
		"no config": func() *daemonv1.StatusResponse { r := full(); r.Config = nil; return r },
		"empty":     func() *daemonv1.StatusResponse { return &daemonv1.StatusResponse{} },
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			c := dialFake(t, &fakeDaemon{status: answer})
			st, err := c.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.ServedConfig(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, st.Config) {
				t.Errorf("ServedConfig = %+v, Status().Config = %+v", got, st.Config)
			}
			if name == "full" && got.DeviceCapability != "sm_90" {
				t.Errorf("ServedConfig = %+v: the served capability is sm_90", got)
			}
		})
	}
	c := dialFake(t, &fakeDaemon{}, grpc.UnaryInterceptor(
		func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, status.Error(codes.Unavailable, "draining")
		}))
	if _, err := c.ServedConfig(context.Background()); status.Code(err) != codes.Unavailable {
		t.Errorf("ServedConfig of a refusing daemon: %v, want Unavailable", err)
	}
}

// TestStatusConfigDecodesAsProto: statusConfig agrees with proto.Unmarshal
// on a config split over two occurrences (merged), on the config's number
// with another wire type (an unknown field to proto.Unmarshal: no config),
// and refuses a truncated answer, as proto.Unmarshal does.
func TestStatusConfigFieldIsTheProtos(t *testing.T) {
	f := daemonv1.File_wcache_daemon_v1_daemon_proto.Messages().ByName("StatusResponse").Fields().ByName("config")
	if f == nil || f.Number() != statusConfigField {
		t.Fatalf("StatusResponse.config is %v, statusConfigField says %d", f, statusConfigField)
	}
}

func TestStatusConfigDecodesAsProto(t *testing.T) {
	num := protowire.Number(5)
	first, _ := proto.Marshal(&configv1.CacheConfig{Model: "/m", TpSize: 2})
	second, _ := proto.Marshal(&configv1.CacheConfig{DeviceCapability: "sm_90"})
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendBytes(b, first)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "GPU-x")
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendBytes(b, second)
	wrongType := protowire.AppendTag(nil, num, protowire.VarintType)
	wrongType = protowire.AppendVarint(wrongType, 1)
	for name, in := range map[string][]byte{"merged": b, "config as a varint": wrongType, "truncated": b[:len(b)-1]} {
		var want daemonv1.StatusResponse
		werr := proto.Unmarshal(in, &want)
		got, err := statusConfig(in)
		switch {
		case (err != nil) != (werr != nil):
			t.Errorf("%s: statusConfig: %v, proto.Unmarshal: %v", name, err, werr)
		case err == nil && !proto.Equal(got, want.GetConfig()):
			t.Errorf("%s: statusConfig = %v, proto.Unmarshal's config = %v", name, got, want.GetConfig())
		}
		if name == "merged" && (got == nil || cacheconfig.FromProto(got).DeviceCapability != "sm_90" || got.GetTpSize() != 2) {
			t.Errorf("merged: statusConfig = %v", got)
		}
	}
}
