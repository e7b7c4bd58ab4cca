package client

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// heldCheckpoint is a checkpoint on disk and the same tensors laid out in
// one "device" file, as a daemon holds them, with its manifest.
type heldCheckpoint struct {
	ck     *safetensors.Checkpoint
	m      *Manifest
	shm    string // the device file
	device []byte // its bytes
}

// holdCheckpoint generates a small checkpoint and copies its tensors into a
// posix-shm file in reverse order, 64-byte aligned, as a daemon would.
func holdCheckpoint(t *testing.T) *heldCheckpoint {
	t.Helper()
	dir := t.TempDir()
	gen, err := safetensorstest.GenerateCheckpoint(dir, safetensorstest.GenOptions{Layers: 1, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &heldCheckpoint{ck: ck, m: &Manifest{}, shm: filepath.Join(dir, "device")}
	for i := len(gen.Tensors) - 1; i >= 0; i-- {
		g := gen.Tensors[i]
		for len(h.device)%64 != 0 {
			h.device = append(h.device, 0xee)
		}
		h.m.Tensors = append(h.m.Tensors, Tensor{Name: g.Name, DType: string(g.DType), Shape: g.Shape,
			Offset: uint64(len(h.device)), Length: g.Bytes})
		h.device = append(h.device, g.Data()...)
	}
	h.m.Handles = []Handle{{Kind: names.KindPosixShm, Data: []byte(h.shm), Size: uint64(len(h.device))}}
	h.write(t)
	return h
}

// write stores the device bytes in the shm file.
func (h *heldCheckpoint) write(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(h.shm, h.device, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMapGivesEveryTensorAtItsOffset(t *testing.T) {
	h := holdCheckpoint(t)
	ts, err := Map(h.m)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Len() != len(h.m.Tensors) || len(ts.All()) != ts.Len() {
		t.Fatalf("%d tensors mapped, the manifest has %d", ts.Len(), len(h.m.Tensors))
	}
	for _, mt := range h.m.Tensors {
		got, ok := ts.Get(mt.Name)
		if !ok {
			t.Fatalf("tensor %s missing", mt.Name)
		}
		if got.DType != mt.DType || len(got.Shape) != len(mt.Shape) ||
			string(got.Data) != string(h.device[mt.Offset:mt.Offset+mt.Length]) {
			t.Fatalf("tensor %s: mapped %s %v, %d bytes, not the manifest's", mt.Name, got.DType, got.Shape, len(got.Data))
		}
		if cap(got.Data) != len(got.Data) {
			t.Fatalf("tensor %s: its view reaches past the tensor (cap %d)", mt.Name, cap(got.Data))
		}
	}
	if _, ok := ts.Get("no.such.tensor"); ok {
		t.Fatal("Get found a tensor that is not there")
	}
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ts.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestMapRefusesWhatItCannotMap(t *testing.T) {
	h := holdCheckpoint(t)
	m := *h.m
	m.Handles = []Handle{{Kind: "cuda-ipc", Data: make([]byte, 64), Size: h.m.Handles[0].Size}}
	_, err := Map(&m)
	var nm *NotMappableError
	if !errors.As(err, &nm) || !errors.Is(err, ErrNotMappable) || nm.Kind != "cuda-ipc" || nm.Handle != 0 {
		t.Fatalf("Map of a cuda-ipc handle: %v, want *NotMappableError", err)
	}
	m.Handles = []Handle{{Kind: names.KindPosixShm, Data: []byte(h.shm), Size: 8}} // tensors lie outside
	if _, err := Map(&m); !errors.Is(err, ErrBadManifest) {
		t.Fatalf("Map of tensors outside their handle: %v, want ErrBadManifest", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(h.shm, link); err != nil {
		t.Fatal(err)
	}
	m.Handles = []Handle{{Kind: names.KindPosixShm, Data: []byte(link), Size: h.m.Handles[0].Size}}
	if _, err := Map(&m); err == nil {
		t.Fatal("Map followed a symlink")
	}
}

func TestVerifyByMapping(t *testing.T) {
	h := holdCheckpoint(t)
	res, err := Verify(context.Background(), h.m, h.ck, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tensors != len(h.m.Tensors) || res.Bytes != h.m.Bytes() || res.Bytes != h.ck.TotalBytes() {
		t.Fatalf("verified %+v, want %d tensors and %d bytes", res, len(h.m.Tensors), h.ck.TotalBytes())
	}
	// One byte changed in the last tensor's last byte.
	last := h.m.Tensors[len(h.m.Tensors)-1]
	h.device[last.Offset+last.Length-1] ^= 1
	h.write(t)
	_, err = Verify(context.Background(), h.m, h.ck, VerifyOptions{})
	if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), last.Name) {
		t.Fatalf("Verify with a changed byte: %v, want ErrVerify naming %s", err, last.Name)
	}
}

func TestVerifyRefusesAnotherTensorSet(t *testing.T) {
	h := holdCheckpoint(t)
	for name, edit := range map[string]func(m *Manifest){
		"missing":  func(m *Manifest) { m.Tensors = m.Tensors[1:] },
		"renamed":  func(m *Manifest) { m.Tensors[0].Name = "model.other.weight" },
		"dtype":    func(m *Manifest) { m.Tensors[0].DType = "F32" },
		"shape":    func(m *Manifest) { m.Tensors[0].Shape = []uint64{1} },
		"repeated": func(m *Manifest) { m.Tensors[1] = m.Tensors[0] },
	} {
		m := *h.m
		m.Tensors = append([]Tensor(nil), h.m.Tensors...)
		edit(&m)
		if _, err := Verify(context.Background(), &m, h.ck, VerifyOptions{}); !errors.Is(err, ErrVerify) {
			t.Errorf("%s: Verify = %v, want ErrVerify", name, err)
		}
	}
}

// deviceImporter is an Importer over bytes held in the test: the way a
// backend reads memory this process cannot map.
type deviceImporter struct {
	device   []byte
	imported int
	freed    int
}

func (d *deviceImporter) Import(_ context.Context, gpu int, h sdk.Handle) (sdk.AllocationID, error) {
	if gpu != 3 || h.Kind != "cuda-ipc" {
		return 0, errors.New("unexpected import")
	}
	d.imported++
	return 7, nil
}

func (d *deviceImporter) Digest(_ context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	out := make([][32]byte, len(ranges))
	for i, r := range ranges {
		out[i] = sha256.Sum256(d.device[r.Offset : r.Offset+r.Length])
	}
	return out, nil
}

func (d *deviceImporter) Free(context.Context, sdk.AllocationID) error {
	d.freed++
	return nil
}

func TestVerifyThroughImporter(t *testing.T) {
	h := holdCheckpoint(t)
	m := *h.m
	m.Handles = []Handle{{Kind: "cuda-ipc", Data: make([]byte, 64), Size: h.m.Handles[0].Size}}
	if _, err := Verify(context.Background(), &m, h.ck, VerifyOptions{}); !errors.Is(err, ErrNotMappable) {
		t.Fatalf("cuda-ipc without an Importer: %v, want ErrNotMappable", err)
	}
	imp := &deviceImporter{device: h.device}
	if _, err := Verify(context.Background(), &m, h.ck, VerifyOptions{Importer: imp, GPU: 3}); err != nil {
		t.Fatal(err)
	}
	if imp.imported != 1 || imp.freed != 1 {
		t.Fatalf("imported %d, freed %d: want one of each", imp.imported, imp.freed)
	}
	first := m.Tensors[0]
	imp.device[first.Offset] ^= 1
	_, err := Verify(context.Background(), &m, h.ck, VerifyOptions{Importer: imp, GPU: 3})
	if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), first.Name) {
		t.Fatalf("changed device byte: %v, want ErrVerify naming %s", err, first.Name)
	}
	if imp.freed != 2 {
		t.Fatalf("a failed verify did not free its import (freed %d)", imp.freed)
	}
}

// TestVerifyReportsProgress: Progress sees the compared bytes grow to the
// manifest's total, for mapped and for imported handles alike.
func TestVerifyReportsProgress(t *testing.T) {
	h := holdCheckpoint(t)
	imported := *h.m
	imported.Handles = []Handle{{Kind: "cuda-ipc", Data: make([]byte, 64), Size: h.m.Handles[0].Size}}
	for name, tc := range map[string]struct {
		m    *Manifest
		opts VerifyOptions
	}{
		"mapped":   {h.m, VerifyOptions{}},
		"imported": {&imported, VerifyOptions{Importer: &deviceImporter{device: h.device}, GPU: 3}},
	} {
		var calls int
		var last, total uint64
		tc.opts.Progress = func(done, tot uint64) {
			if done < last || done > tot {
				t.Errorf("%s: progress went %d → %d of %d", name, last, done, tot)
			}
			calls, last, total = calls+1, done, tot
		}
		if _, err := Verify(context.Background(), tc.m, h.ck, tc.opts); err != nil {
			t.Fatal(err)
		}
		if calls < len(h.m.Tensors) || last != h.m.Bytes() || total != h.m.Bytes() {
			t.Errorf("%s: %d calls ending at %d of %d; want at least one per tensor, ending at %d", name, calls, last, total, h.m.Bytes())
		}
	}
}
