package backendrpc_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/wcache/wcache/internal/grpcpipe"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/filedigest"
	"github.com/wcache/wcache/sdk/mock"
)

func TestTypedErrorsSurviveTheBoundary(t *testing.T) {
	cases := []struct {
		kind error
		code codes.Code
	}{
		{sdk.ErrNoSuchDevice, codes.NotFound},
		{sdk.ErrNoSuchAllocation, codes.NotFound},
		{sdk.ErrOutOfMemory, codes.ResourceExhausted},
		{sdk.ErrUnsupported, codes.Unimplemented},
		{sdk.ErrUnavailable, codes.Unavailable},
		{sdk.ErrInvalidArgument, codes.InvalidArgument},
	}
	sentinels := []error{sdk.ErrNoSuchDevice, sdk.ErrNoSuchAllocation, sdk.ErrOutOfMemory,
		sdk.ErrUnsupported, sdk.ErrUnavailable, sdk.ErrInvalidArgument}
	for _, tc := range cases {
		t.Run(tc.kind.Error(), func(t *testing.T) {
			sent := sdk.Errorf(tc.kind, "allocate 12 bytes on device 3")
			client, _ := grpcpipe.Connect(t, &mock.Backend{
				AllocateFunc: func(context.Context, int, uint64) (sdk.AllocationID, uint64, error) { return 0, 0, sent },
			})
			_, _, err := client.Allocate(context.Background(), 3, 12)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want errors.Is %v", err, tc.kind)
			}
			for _, other := range sentinels {
				if other != tc.kind && errors.Is(err, other) {
					t.Errorf("err also matches %v", other)
				}
			}
			if err.Error() != sent.Error() {
				t.Errorf("message = %q, want %q", err.Error(), sent.Error())
			}
			var re *sdk.RemoteError
			if !errors.As(err, &re) || re.Code != tc.code {
				t.Errorf("err = %#v, want *sdk.RemoteError with code %v", err, tc.code)
			}
		})
	}
}

func TestUntypedErrorKeepsMessageAndMatchesNoSentinel(t *testing.T) {
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		FreeFunc: func(context.Context, sdk.AllocationID) error { return errors.New("driver said 999") },
	})
	err := client.Free(context.Background(), 4)
	if err == nil || err.Error() != "driver said 999" {
		t.Fatalf("err = %v", err)
	}
	for _, s := range []error{sdk.ErrNoSuchDevice, sdk.ErrNoSuchAllocation, sdk.ErrOutOfMemory,
		sdk.ErrUnsupported, sdk.ErrUnavailable, sdk.ErrInvalidArgument} {
		if errors.Is(err, s) {
			t.Errorf("untyped error matches %v", s)
		}
	}
}

func TestValuesRoundTrip(t *testing.T) {
	info := sdk.Info{Name: "x", Version: "1.2.3", Platform: "mock", HandleKinds: []string{"posix-shm", "cuda-ipc"}}
	devs := []sdk.Device{
		{Ordinal: 0, UUID: "GPU-00000000-1111-2222-3333-444444444444", Name: "A", TotalMemory: 1 << 40, FreeMemory: 5, PCIBusID: "0000:01:00.0", Capability: "9.0"},
		{Ordinal: 1, UUID: "MIG-00000000-1111-2222-3333-444444444445", Name: "B", TotalMemory: 7, Capability: "mock"},
	}
	handle := sdk.Handle{Kind: "cuda-ipc", Data: bytes.Repeat([]byte{0xab}, 64), Size: 1 << 33}
	extents := []sdk.Extent{{Path: "/a", FileOffset: 1, Length: 2, DestOffset: 3}, {Path: "/b", FileOffset: 1 << 40, Length: 5, DestOffset: 6}}
	ranges := []sdk.Range{{Offset: 0, Length: 3}, {Offset: 1 << 35, Length: 9}}
	sums := [][32]byte{sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))}
	var gotExtents []sdk.Extent
	var gotRanges []sdk.Range
	var gotHandle sdk.Handle
	var freed sdk.AllocationID
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		InfoFunc:    func(context.Context) (sdk.Info, error) { return info, nil },
		DevicesFunc: func(context.Context) ([]sdk.Device, error) { return devs, nil },
		DeviceUUIDFunc: func(_ context.Context, o int) (string, error) {
			return devs[o].UUID, nil
		},
		AllocateFunc: func(_ context.Context, o int, n uint64) (sdk.AllocationID, uint64, error) {
			return sdk.AllocationID(100 + o), n + 4096, nil
		},
		LoadFunc: func(_ context.Context, id sdk.AllocationID, e []sdk.Extent, _ sdk.ProgressFunc) error {
			gotExtents = e
			return nil
		},
		ExportFunc: func(context.Context, sdk.AllocationID) (sdk.Handle, error) { return handle, nil },
		ImportFunc: func(_ context.Context, _ int, h sdk.Handle) (sdk.AllocationID, error) {
			gotHandle = h
			return 1 << 60, nil
		},
		ReadFunc: func(_ context.Context, _ sdk.AllocationID, off, n uint64) ([]byte, error) {
			return bytes.Repeat([]byte{byte(off)}, int(n)), nil
		},
		DigestFunc: func(_ context.Context, _ sdk.AllocationID, r []sdk.Range) ([][32]byte, error) {
			gotRanges = r
			return sums, nil
		},
		FreeFunc: func(_ context.Context, id sdk.AllocationID) error { freed = id; return nil },
	})
	ctx := context.Background()
	if got, err := client.Info(ctx); err != nil || !reflect.DeepEqual(got, info) {
		t.Errorf("Info = %+v, %v", got, err)
	}
	if got, err := client.Devices(ctx); err != nil || !reflect.DeepEqual(got, devs) {
		t.Errorf("Devices = %+v, %v", got, err)
	}
	if got, err := client.DeviceUUID(ctx, 1); err != nil || got != devs[1].UUID {
		t.Errorf("DeviceUUID = %q, %v", got, err)
	}
	if id, n, err := client.Allocate(ctx, 2, 10); err != nil || id != 102 || n != 4106 {
		t.Errorf("Allocate = %d, %d, %v", id, n, err)
	}
	if err := client.Load(ctx, 1, extents, nil); err != nil || !reflect.DeepEqual(gotExtents, extents) {
		t.Errorf("Load: %v, server saw %+v", err, gotExtents)
	}
	if got, err := client.Export(ctx, 1); err != nil || !reflect.DeepEqual(got, handle) {
		t.Errorf("Export = %+v, %v", got, err)
	}
	if id, err := client.Import(ctx, 0, handle); err != nil || id != 1<<60 || !reflect.DeepEqual(gotHandle, handle) {
		t.Errorf("Import = %d, %v; server saw %+v", id, err, gotHandle)
	}
	if got, err := client.Read(ctx, 1, 9, 5); err != nil || !bytes.Equal(got, []byte{9, 9, 9, 9, 9}) {
		t.Errorf("Read = %v, %v", got, err)
	}
	if got, err := client.Digest(ctx, 1, ranges); err != nil || !reflect.DeepEqual(got, sums) || !reflect.DeepEqual(gotRanges, ranges) {
		t.Errorf("Digest = %x, %v; server saw %+v", got, err, gotRanges)
	}
	if err := client.Free(ctx, 77); err != nil || freed != 77 {
		t.Errorf("Free: %v, server freed %d", err, freed)
	}
}

func TestClientRefusesWhatTheWireCannotCarry(t *testing.T) {
	called := false
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		AllocateFunc: func(context.Context, int, uint64) (sdk.AllocationID, uint64, error) {
			called = true
			return 1, 1, nil
		},
	})
	if _, _, err := client.Allocate(context.Background(), -1, 1); !errors.Is(err, sdk.ErrNoSuchDevice) {
		t.Errorf("Allocate(-1) = %v, want sdk.ErrNoSuchDevice", err)
	}
	if _, err := client.Read(context.Background(), 1, 0, sdk.MaxReadBytes+1); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("oversized Read = %v, want sdk.ErrInvalidArgument", err)
	}
	if called {
		t.Error("the plugin was called for an argument the client must refuse")
	}
}

func TestClientRejectsProtocolViolations(t *testing.T) {
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		DigestFunc: func(context.Context, sdk.AllocationID, []sdk.Range) ([][32]byte, error) {
			return [][32]byte{{}}, nil // one digest for two ranges
		},
		ReadFunc: func(context.Context, sdk.AllocationID, uint64, uint64) ([]byte, error) { return []byte{1}, nil },
		AllocateFunc: func(context.Context, int, uint64) (sdk.AllocationID, uint64, error) {
			return 1, 5, nil // less than asked
		},
	})
	ctx := context.Background()
	if _, err := client.Digest(ctx, 1, []sdk.Range{{Offset: 0, Length: 1}, {Offset: 1, Length: 1}}); err == nil {
		t.Error("Digest with a missing digest succeeded")
	}
	if _, err := client.Read(ctx, 1, 0, 3); err == nil {
		t.Error("short Read succeeded")
	}
	if _, _, err := client.Allocate(ctx, 0, 10); err == nil {
		t.Error("Allocate reserving less than asked succeeded")
	}
}

func TestLoadStreamsThrottledProgress(t *testing.T) {
	const step, total = 1 << 20, 300 << 20
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		LoadFunc: func(_ context.Context, _ sdk.AllocationID, _ []sdk.Extent, progress sdk.ProgressFunc) error {
			for done := uint64(step); done <= total; done += step {
				progress(done, total)
			}
			return nil
		},
	})
	var seen [][2]uint64
	err := client.Load(context.Background(), 1, []sdk.Extent{{Path: "/a", Length: total / 2}, {Path: "/b", Length: total / 2}},
		func(done, tot uint64) { seen = append(seen, [2]uint64{done, tot}) })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(seen) == 0 || seen[len(seen)-1] != [2]uint64{total, total} {
		t.Fatalf("progress = %v, want it to end with (%d, %d)", seen, total, total)
	}
	// 300 reports of 1 MiB, throttled to one per 64 MiB (or 100 ms): at most
	// 300/64+1 intermediate messages plus the final one.
	if len(seen) > 7 {
		t.Errorf("got %d progress messages, throttling failed: %v", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i][0] < seen[i-1][0] || seen[i][1] != total {
			t.Errorf("progress not monotonic or total changed: %v", seen)
		}
	}
}

func TestLoadStatsCrossTheBoundary(t *testing.T) {
	want := sdk.LoadStats{Bytes: 300, Chunks: 3, Readers: 2, DirectFiles: 1, BufferedFiles: 1,
		Wall: 5 * time.Millisecond, Read: 6 * time.Millisecond, BufferWait: time.Millisecond,
		Queue: 2 * time.Microsecond, CopyWait: 3 * time.Microsecond, Hash: 4 * time.Microsecond,
		Leaves: []filedigest.FileLeaves{{Algorithm: filedigest.BLAKE3Tree, Path: "/a", Size: 3 << 20, Leaves: []filedigest.Leaf{{Index: 1, Sum: filedigest.Sum{7, 8}}, {Index: 2, Sum: filedigest.Sum{31: 9}}}}}}
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		LoadStatsFunc: func(context.Context, sdk.AllocationID, []sdk.Extent, sdk.ProgressFunc) (sdk.LoadStats, error) {
			return want, nil
		},
	})
	got, err := sdk.LoadWithStats(context.Background(), client, 1, []sdk.Extent{{Path: "/a", Length: 300}}, nil)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("LoadWithStats = %+v, %v; want %+v", got, err, want)
	}
	// A backend that measures nothing sends no stats: zero on arrival.
	client, _ = grpcpipe.Connect(t, &mock.Backend{
		LoadFunc: func(context.Context, sdk.AllocationID, []sdk.Extent, sdk.ProgressFunc) error { return nil },
	})
	got, err = sdk.LoadWithStats(context.Background(), client, 1, []sdk.Extent{{Path: "/a", Length: 300}}, nil)
	if err != nil || !got.IsZero() {
		t.Fatalf("LoadWithStats without stats = %+v, %v; want zero", got, err)
	}
}

// TestWithoutDigestCrossesTheBoundary: a Load under sdk.WithoutDigest
// reaches the plugin's backend asking for no digest; any other Load asks
// for one.
func TestWithoutDigestCrossesTheBoundary(t *testing.T) {
	var wanted []bool
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		LoadStatsFunc: func(ctx context.Context, _ sdk.AllocationID, _ []sdk.Extent, _ sdk.ProgressFunc) (sdk.LoadStats, error) {
			wanted = append(wanted, sdk.DigestWanted(ctx))
			return sdk.LoadStats{}, nil
		},
	})
	for _, ctx := range []context.Context{context.Background(), sdk.WithoutDigest(context.Background())} {
		if _, err := sdk.LoadWithStats(ctx, client, 1, []sdk.Extent{{Path: "/a", Length: 300}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(wanted, []bool{true, false}) {
		t.Fatalf("the backend saw digest wanted = %v; want [true false]", wanted)
	}
}

func TestLoadErrorAfterProgressIsTyped(t *testing.T) {
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		LoadFunc: func(_ context.Context, _ sdk.AllocationID, _ []sdk.Extent, progress sdk.ProgressFunc) error {
			progress(1, 10)
			return sdk.Errorf(sdk.ErrInvalidArgument, "extent 0 ends past the allocation")
		},
	})
	err := client.Load(context.Background(), 1, []sdk.Extent{{Length: 10}}, nil)
	if !errors.Is(err, sdk.ErrInvalidArgument) || err.Error() != "extent 0 ends past the allocation: invalid argument" {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadCancelledByCaller(t *testing.T) {
	started := make(chan struct{})
	client, _ := grpcpipe.Connect(t, &mock.Backend{
		LoadFunc: func(ctx context.Context, _ sdk.AllocationID, _ []sdk.Extent, _ sdk.ProgressFunc) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	err := client.Load(ctx, 1, []sdk.Extent{{Length: 10}}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("a cancelled call must not look like a dead plugin: %v", err)
	}
}

func TestDeadServerIsUnavailable(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	client, srv := grpcpipe.Connect(t, &mock.Backend{
		LoadFunc: func(ctx context.Context, _ sdk.AllocationID, _ []sdk.Extent, _ sdk.ProgressFunc) error {
			once.Do(func() { close(started) })
			<-ctx.Done()
			return sdk.Errorf(sdk.ErrOutOfMemory, "must not arrive")
		},
	})
	go func() { <-started; srv.Stop() }()
	err := client.Load(context.Background(), 1, []sdk.Extent{{Length: 10}}, nil)
	var te *sdk.TransportError
	if !errors.Is(err, sdk.ErrUnavailable) || !errors.As(err, &te) || te.Op != "Load" {
		t.Fatalf("Load on a dying server: err = %v, want *sdk.TransportError wrapping sdk.ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.Info(ctx); !errors.Is(err, sdk.ErrUnavailable) {
		t.Fatalf("Info on a dead server: err = %v, want sdk.ErrUnavailable", err)
	}
}

// A backend without PeerCopy answers sdk.ErrUnsupported across the boundary,
// the error a daemon falls back to the files on; one with it returns the
// new allocation and its stats.
func TestPeerCopyAcrossTheBoundary(t *testing.T) {
	client, _ := grpcpipe.Connect(t, &mock.Backend{})
	_, err := sdk.PeerCopy(context.Background(), client, sdk.PeerCopyRequest{Source: sdk.Handle{Kind: "posix-shm", Data: []byte("/x"), Size: 8}}, nil)
	if !errors.Is(err, sdk.ErrUnsupported) {
		t.Fatalf("PeerCopy on a backend without it: %v, want sdk.ErrUnsupported", err)
	}
	if _, err := sdk.PeerCopy(context.Background(), struct{ sdk.Backend }{client}, sdk.PeerCopyRequest{}, nil); !errors.Is(err, sdk.ErrUnsupported) {
		t.Fatalf("sdk.PeerCopy on a sdk.Backend that is no PeerCopier: %v", err)
	}

	var got sdk.PeerCopyRequest
	client, _ = grpcpipe.Connect(t, &mock.Backend{PeerCopyFunc: func(_ context.Context, req sdk.PeerCopyRequest, progress sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
		got = req
		progress(4, 8)
		return sdk.PeerCopyResult{ID: 7, Bytes: 4096, Stats: sdk.PeerCopyStats{Bytes: 8, Chunks: 2, Streams: 2, Wall: time.Millisecond, Path: "p2p"}}, nil
	}})
	var seen []uint64
	res, err := sdk.PeerCopy(context.Background(), client, sdk.PeerCopyRequest{Ordinal: 1, Source: sdk.Handle{Kind: "posix-shm", Data: []byte("/x"), Size: 8}},
		func(done, _ uint64) { seen = append(seen, done) })
	if err != nil {
		t.Fatal(err)
	}
	want := sdk.PeerCopyResult{ID: 7, Bytes: 4096, Stats: sdk.PeerCopyStats{Bytes: 8, Chunks: 2, Streams: 2, Wall: time.Millisecond, Path: "p2p"}}
	if !reflect.DeepEqual(res, want) || got.Ordinal != 1 || string(got.Source.Data) != "/x" || got.Source.Size != 8 {
		t.Fatalf("result %+v, request seen %+v", res, got)
	}
	if len(seen) == 0 || seen[len(seen)-1] != 8 {
		t.Fatalf("progress %v, want it to end at 8", seen)
	}

	// A plugin that reserves less than it copied violates the protocol: the
	// host frees the allocation and fails.
	var freed []sdk.AllocationID
	client, _ = grpcpipe.Connect(t, &mock.Backend{
		PeerCopyFunc: func(context.Context, sdk.PeerCopyRequest, sdk.ProgressFunc) (sdk.PeerCopyResult, error) {
			return sdk.PeerCopyResult{ID: 9, Bytes: 4}, nil
		},
		FreeFunc: func(_ context.Context, id sdk.AllocationID) error { freed = append(freed, id); return nil },
	})
	if _, err := sdk.PeerCopy(context.Background(), client, sdk.PeerCopyRequest{Source: sdk.Handle{Kind: "posix-shm", Data: []byte("/x"), Size: 8}}, nil); err == nil || len(freed) != 1 || freed[0] != 9 {
		t.Fatalf("short reservation: err %v, freed %v", err, freed)
	}
}
