package backendrpc

import (
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"

	"fmt"
	"math"
	"time"

	backendv1 "github.com/wcache/wcache/proto/wcache/backend/v1"
)

// This file holds the explicit conversions between the domain types of
// backend.go and the generated protobuf messages. Nothing else in the
// adapters touches proto fields directly.

func infoToProto(in sdk.Info) *backendv1.InfoResponse {
	return &backendv1.InfoResponse{
		Name:        in.Name,
		Version:     in.Version,
		Platform:    in.Platform,
		HandleKinds: append([]string(nil), in.HandleKinds...),
		Options:     optionsToProto(in.Options),
	}
}

func infoFromProto(in *backendv1.InfoResponse) sdk.Info {
	return sdk.Info{
		Name:        in.GetName(),
		Version:     in.GetVersion(),
		Platform:    in.GetPlatform(),
		HandleKinds: append([]string(nil), in.GetHandleKinds()...),
		Options:     optionsFromProto(in.GetOptions()),
	}
}

func optionsToProto(in []sdk.Option) []*backendv1.ConfigOption {
	if len(in) == 0 {
		return nil
	}
	out := make([]*backendv1.ConfigOption, len(in))
	for i, o := range in {
		out[i] = &backendv1.ConfigOption{Name: o.Name, Type: string(o.Type), DefaultValue: o.Default,
			Description: o.Description, Env: o.Env}
	}
	return out
}

func optionsFromProto(in []*backendv1.ConfigOption) []sdk.Option {
	if len(in) == 0 {
		return nil
	}
	out := make([]sdk.Option, len(in))
	for i, o := range in {
		out[i] = sdk.Option{Name: o.GetName(), Type: sdk.OptionType(o.GetType()), Default: o.GetDefaultValue(),
			Description: o.GetDescription(), Env: o.GetEnv()}
	}
	return out
}

func deviceToProto(d sdk.Device) (*backendv1.Device, error) {
	ord, err := ordinalToProto(d.Ordinal)
	if err != nil {
		return nil, err
	}
	return &backendv1.Device{
		Ordinal:          ord,
		Uuid:             d.UUID,
		Name:             d.Name,
		TotalMemoryBytes: d.TotalMemory,
		FreeMemoryBytes:  d.FreeMemory,
		PciBusId:         d.PCIBusID,
		Capability:       d.Capability,
	}, nil
}

func deviceFromProto(d *backendv1.Device) sdk.Device {
	return sdk.Device{
		Ordinal:     int(d.GetOrdinal()),
		UUID:        d.GetUuid(),
		Name:        d.GetName(),
		TotalMemory: d.GetTotalMemoryBytes(),
		FreeMemory:  d.GetFreeMemoryBytes(),
		PCIBusID:    d.GetPciBusId(),
		Capability:  d.GetCapability(),
	}
}

// ordinalToProto refuses ordinals that uint32 cannot carry; no device has
// them, so they are sdk.ErrNoSuchDevice.
func ordinalToProto(ordinal int) (uint32, error) {
	if ordinal < 0 || uint64(ordinal) > math.MaxUint32 {
		return 0, sdk.Errorf(sdk.ErrNoSuchDevice, "device ordinal %d", ordinal)
	}
	return uint32(ordinal), nil
}

func extentsToProto(in []sdk.Extent) []*backendv1.Extent {
	out := make([]*backendv1.Extent, len(in))
	for i, e := range in {
		out[i] = &backendv1.Extent{
			Path:       e.Path,
			FileOffset: e.FileOffset,
			Length:     e.Length,
			DestOffset: e.DestOffset,
		}
	}
	return out
}

func extentsFromProto(in []*backendv1.Extent) []sdk.Extent {
	out := make([]sdk.Extent, len(in))
	for i, e := range in {
		out[i] = sdk.Extent{
			Path:       e.GetPath(),
			FileOffset: e.GetFileOffset(),
			Length:     e.GetLength(),
			DestOffset: e.GetDestOffset(),
		}
	}
	return out
}

func handleToProto(h sdk.Handle) *backendv1.Handle {
	return &backendv1.Handle{
		Kind: h.Kind,
		Data: append([]byte(nil), h.Data...),
		Size: h.Size,
	}
}

func handleFromProto(h *backendv1.Handle) sdk.Handle {
	return sdk.Handle{
		Kind: h.GetKind(),
		Data: append([]byte(nil), h.GetData()...),
		Size: h.GetSize(),
	}
}

func rangesToProto(in []sdk.Range) []*backendv1.Range {
	out := make([]*backendv1.Range, len(in))
	for i, r := range in {
		out[i] = &backendv1.Range{Offset: r.Offset, Length: r.Length}
	}
	return out
}

func rangesFromProto(in []*backendv1.Range) []sdk.Range {
	out := make([]sdk.Range, len(in))
	for i, r := range in {
		out[i] = sdk.Range{Offset: r.GetOffset(), Length: r.GetLength()}
	}
	return out
}

func digestsToProto(in [][32]byte) [][]byte {
	out := make([][]byte, len(in))
	for i := range in {
		out[i] = append([]byte(nil), in[i][:]...)
	}
	return out
}

// digestsFromProto checks that the plugin answered one 32-byte digest per
// requested range.
func digestsFromProto(in [][]byte, want int) ([][32]byte, error) {
	if len(in) != want {
		return nil, fmt.Errorf("backend answered %d digests for %d ranges: protocol violation", len(in), want)
	}
	out := make([][32]byte, len(in))
	for i, d := range in {
		if len(d) != 32 {
			return nil, fmt.Errorf("backend digest %d has %d bytes, want 32: protocol violation", i, len(d))
		}
		copy(out[i][:], d)
	}
	return out, nil
}

// loadStatsToProto returns nil for zero stats (a backend that measured
// nothing), so that the final message stays as it was.
func loadStatsToProto(s sdk.LoadStats) *backendv1.LoadStats {
	if s.IsZero() {
		return nil
	}
	return &backendv1.LoadStats{
		Bytes:         s.Bytes,
		Chunks:        s.Chunks,
		Readers:       clampUint32(s.Readers),
		DirectFiles:   clampUint32(s.DirectFiles),
		BufferedFiles: clampUint32(s.BufferedFiles),
		WallNs:        durationToNs(s.Wall),
		ReadNs:        durationToNs(s.Read),
		BufferWaitNs:  durationToNs(s.BufferWait),
		QueueNs:       durationToNs(s.Queue),
		CopyWaitNs:    durationToNs(s.CopyWait),
		Leaves:        fileLeavesToProto(s.Leaves),
		HashNs:        durationToNs(s.Hash),
	}
}

func loadStatsFromProto(s *backendv1.LoadStats) sdk.LoadStats {
	if s == nil {
		return sdk.LoadStats{}
	}
	return sdk.LoadStats{
		Bytes:         s.GetBytes(),
		Chunks:        s.GetChunks(),
		Readers:       int(s.GetReaders()),
		DirectFiles:   int(s.GetDirectFiles()),
		BufferedFiles: int(s.GetBufferedFiles()),
		Wall:          nsToDuration(s.GetWallNs()),
		Read:          nsToDuration(s.GetReadNs()),
		BufferWait:    nsToDuration(s.GetBufferWaitNs()),
		Queue:         nsToDuration(s.GetQueueNs()),
		CopyWait:      nsToDuration(s.GetCopyWaitNs()),
		Leaves:        fileLeavesFromProto(s.GetLeaves()),
		Hash:          nsToDuration(s.GetHashNs()),
	}
}

func fileLeavesToProto(in []filedigest.FileLeaves) []*backendv1.FileLeaves {
	out := make([]*backendv1.FileLeaves, 0, len(in))
	for _, f := range in {
		p := &backendv1.FileLeaves{Algorithm: string(f.Algorithm), Path: f.Path, Size: uint64(max(f.Size, 0)),
			Indices: make([]uint64, len(f.Leaves)), Sums: make([]byte, 0, len(f.Leaves)*len(filedigest.Sum{}))}
		for i, l := range f.Leaves {
			p.Indices[i] = uint64(l.Index)
			p.Sums = append(p.Sums, l.Sum[:]...)
		}
		out = append(out, p)
	}
	return out
}

// fileLeavesFromProto converts the leaves a plugin sent; an entry whose
// sums do not match its indices, or of an algorithm this build does not
// know, is dropped (the daemon then hashes that file's leaves itself). An
// entry without an algorithm is SHA256Tree (a plugin built before the
// field).
func fileLeavesFromProto(in []*backendv1.FileLeaves) []filedigest.FileLeaves {
	var out []filedigest.FileLeaves
	for _, p := range in {
		const n = len(filedigest.Sum{})
		idx, sums := p.GetIndices(), p.GetSums()
		alg, err := filedigest.ParseAlgorithm(p.GetAlgorithm())
		if err != nil || len(sums) != n*len(idx) || p.GetSize() > math.MaxInt64 {
			continue
		}
		f := filedigest.FileLeaves{Algorithm: alg, Path: p.GetPath(), Size: int64(p.GetSize()), Leaves: make([]filedigest.Leaf, len(idx))}
		for i, ix := range idx {
			f.Leaves[i].Index = int64(min(ix, math.MaxInt64))
			copy(f.Leaves[i].Sum[:], sums[i*n:])
		}
		out = append(out, f)
	}
	return out
}

func clampUint32(n int) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

func durationToNs(d time.Duration) uint64 { return uint64(max(d, 0)) }

func nsToDuration(ns uint64) time.Duration { return time.Duration(min(ns, math.MaxInt64)) }

func peerCopyStatsToProto(s sdk.PeerCopyStats) *backendv1.PeerCopyStats {
	return &backendv1.PeerCopyStats{Bytes: s.Bytes, Chunks: s.Chunks, Streams: clampUint32(s.Streams),
		WallNs: durationToNs(s.Wall), Path: s.Path}
}

func peerCopyStatsFromProto(s *backendv1.PeerCopyStats) sdk.PeerCopyStats {
	return sdk.PeerCopyStats{Bytes: s.GetBytes(), Chunks: s.GetChunks(), Streams: int(s.GetStreams()),
		Wall: nsToDuration(s.GetWallNs()), Path: s.GetPath()}
}
