package testproc

import (
	"testing"

	"github.com/wcache/wcache/core/safetensors"
)

func TestGenOptionsHitsTheTargets(t *testing.T) {
	for _, spec := range []ModelSpec{
		{Bytes: 256 << 20, Tensors: 300},
		{Bytes: 256 << 20, Tensors: 3000},
		{Bytes: 4 << 30, Tensors: 300},
		{Bytes: 4 << 30, Tensors: 3000},
	} {
		o, err := genOptions(spec)
		if err != nil {
			t.Fatal(err)
		}
		tensors := o.Layers*tensorsPerLayer + extraTensors
		if tensors != spec.Tensors {
			t.Errorf("%s: %d tensors", spec.Name(), tensors)
		}
		got := float64(modelBytes(o))
		if d := got/float64(spec.Bytes) - 1; d < -0.15 || d > 0.15 {
			t.Errorf("%s: %d bytes, %.0f%% off", spec.Name(), uint64(got), 100*d)
		}
		if o.Shards < 1 || modelBytes(o)/uint64(o.Shards) > 2*maxShardBytes {
			t.Errorf("%s: %d shards", spec.Name(), o.Shards)
		}
		if o.HiddenSize%hiddenMultiple != 0 {
			t.Errorf("%s: hidden %d", spec.Name(), o.HiddenSize)
		}
	}
	if _, err := genOptions(ModelSpec{Bytes: 1 << 20, Tensors: 5}); err == nil {
		t.Error("a model of 5 tensors was accepted")
	}
}

func TestGenerateModelMatchesItsSpec(t *testing.T) {
	m, _, err := GenerateModel(t.TempDir(), ModelSpec{Bytes: 2 << 20, Tensors: 30})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.NumTensors() != m.Tensors || ck.TotalBytes() != m.Bytes {
		t.Errorf("checkpoint has %d tensors of %d bytes, Model says %d of %d", ck.NumTensors(), ck.TotalBytes(), m.Tensors, m.Bytes)
	}
	if m.Tensors != 30 {
		t.Errorf("%d tensors, want 30", m.Tensors)
	}
}
