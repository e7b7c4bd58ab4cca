package launcher

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// r is shorthand for an expected rank: tp, pp, gpu (Local is filled in order).
type r3 struct{ tp, pp, gpu int }

func TestPlaceSGLangLayouts(t *testing.T) {
	one := func(tp, pp int) Topology {
		return Topology{TPSize: tp, PPSize: pp, NNodes: 1, GPUIDStep: 1}
	}
	tests := []struct {
		name string
		topo Topology
		want []r3
	}{
		{
			name: "tp=8 on one node",
			topo: one(8, 1),
			want: []r3{{0, 0, 0}, {1, 0, 1}, {2, 0, 2}, {3, 0, 3}, {4, 0, 4}, {5, 0, 5}, {6, 0, 6}, {7, 0, 7}},
		},
		{
			name: "tp=16 over 2 nodes, node 0",
			topo: Topology{TPSize: 16, PPSize: 1, NNodes: 2, NodeRank: 0, GPUIDStep: 1},
			want: []r3{{0, 0, 0}, {1, 0, 1}, {2, 0, 2}, {3, 0, 3}, {4, 0, 4}, {5, 0, 5}, {6, 0, 6}, {7, 0, 7}},
		},
		{
			name: "tp=16 over 2 nodes, node 1 hosts tp 8..15 on GPUs 0..7",
			topo: Topology{TPSize: 16, PPSize: 1, NNodes: 2, NodeRank: 1, GPUIDStep: 1},
			want: []r3{{8, 0, 0}, {9, 0, 1}, {10, 0, 2}, {11, 0, 3}, {12, 0, 4}, {13, 0, 5}, {14, 0, 6}, {15, 0, 7}},
		},
		{
			name: "pp=2 tp=4 on one node: stage 1 on GPUs 4..7",
			topo: one(4, 2),
			want: []r3{{0, 0, 0}, {1, 0, 1}, {2, 0, 2}, {3, 0, 3}, {0, 1, 4}, {1, 1, 5}, {2, 1, 6}, {3, 1, 7}},
		},
		{
			name: "pp=2 tp=4 over 2 nodes, node 0",
			topo: Topology{TPSize: 4, PPSize: 2, NNodes: 2, NodeRank: 0, GPUIDStep: 1},
			want: []r3{{0, 0, 0}, {1, 0, 1}, {2, 0, 2}, {3, 0, 3}},
		},
		{
			name: "pp=2 tp=4 over 2 nodes, node 1 hosts stage 1 on GPUs 0..3",
			topo: Topology{TPSize: 4, PPSize: 2, NNodes: 2, NodeRank: 1, GPUIDStep: 1},
			want: []r3{{0, 1, 0}, {1, 1, 1}, {2, 1, 2}, {3, 1, 3}},
		},
		{
			name: "pp=4 tp=2 over 2 nodes, node 1 hosts stages 2 and 3",
			topo: Topology{TPSize: 2, PPSize: 4, NNodes: 2, NodeRank: 1, GPUIDStep: 1},
			want: []r3{{0, 2, 0}, {1, 2, 1}, {0, 3, 2}, {1, 3, 3}},
		},
		{
			name: "pp=2 tp=8 over 4 nodes, node 3 hosts stage 1, tp 4..7",
			topo: Topology{TPSize: 8, PPSize: 2, NNodes: 4, NodeRank: 3, GPUIDStep: 1},
			want: []r3{{4, 1, 0}, {5, 1, 1}, {6, 1, 2}, {7, 1, 3}},
		},
		{
			name: "gpu_id_step=2 spaces TP ranks",
			topo: Topology{TPSize: 4, PPSize: 1, NNodes: 1, GPUIDStep: 2},
			want: []r3{{0, 0, 0}, {1, 0, 2}, {2, 0, 4}, {3, 0, 6}},
		},
		{
			name: "base_gpu_id=1 with gpu_id_step=2 takes the odd GPUs",
			topo: Topology{TPSize: 4, PPSize: 1, NNodes: 1, BaseGPUID: 1, GPUIDStep: 2},
			want: []r3{{0, 0, 1}, {1, 0, 3}, {2, 0, 5}, {3, 0, 7}},
		},
		{
			name: "base_gpu_id=4 tp=4",
			topo: Topology{TPSize: 4, PPSize: 1, NNodes: 1, BaseGPUID: 4, GPUIDStep: 1},
			want: []r3{{0, 0, 4}, {1, 0, 5}, {2, 0, 6}, {3, 0, 7}},
		},
		{
			name: "single GPU",
			topo: one(1, 1),
			want: []r3{{0, 0, 0}},
		},
		{
			name: "explicit list, reversed",
			topo: Topology{TPSize: 4, PPSize: 1, NNodes: 1, GPUIDStep: 1, GPUs: []int{3, 2, 1, 0}},
			want: []r3{{0, 0, 3}, {1, 0, 2}, {2, 0, 1}, {3, 0, 0}},
		},
		{
			name: "explicit list is indexed pp-major then tp",
			topo: Topology{TPSize: 2, PPSize: 2, NNodes: 1, GPUIDStep: 1, GPUs: []int{7, 6, 5, 4}},
			want: []r3{{0, 0, 7}, {1, 0, 6}, {0, 1, 5}, {1, 1, 4}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.topo)
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			want := make([]Rank, len(tc.want))
			for i, w := range tc.want {
				want[i] = Rank{Local: i, TPRank: w.tp, PPRank: w.pp, GPUID: w.gpu}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Place(%+v)\n got %v\nwant %v", tc.topo, got, want)
			}
		})
	}
}

// TestPlaceCoversEveryRankOnce checks, for many valid multi-node layouts, that
// the nodes together host every (tp, pp) rank exactly once.
func TestPlaceCoversEveryRankOnce(t *testing.T) {
	for _, tc := range []struct{ tp, pp, nnodes int }{
		{8, 1, 1}, {16, 1, 2}, {32, 1, 4}, {4, 2, 1}, {4, 2, 2}, {8, 2, 4}, {2, 4, 2}, {2, 4, 4}, {8, 8, 2}, {1, 3, 3},
	} {
		seen := map[[2]int]int{}
		for node := 0; node < tc.nnodes; node++ {
			ranks, err := Place(Topology{TPSize: tc.tp, PPSize: tc.pp, NNodes: tc.nnodes, NodeRank: node, GPUIDStep: 1})
			if err != nil {
				t.Fatalf("tp=%d pp=%d nnodes=%d node=%d: %v", tc.tp, tc.pp, tc.nnodes, node, err)
			}
			for _, r := range ranks {
				seen[[2]int{r.TPRank, r.PPRank}]++
			}
		}
		if len(seen) != tc.tp*tc.pp {
			t.Errorf("tp=%d pp=%d nnodes=%d: %d distinct ranks hosted, want %d", tc.tp, tc.pp, tc.nnodes, len(seen), tc.tp*tc.pp)
		}
		for k, n := range seen {
			if n != 1 || k[0] >= tc.tp || k[1] >= tc.pp {
				t.Errorf("tp=%d pp=%d nnodes=%d: rank tp %d pp %d hosted %d times", tc.tp, tc.pp, tc.nnodes, k[0], k[1], n)
			}
		}
	}
}

func TestPlaceRefusesBadInput(t *testing.T) {
	ok := Topology{TPSize: 4, PPSize: 1, NNodes: 1, GPUIDStep: 1}
	with := func(f func(*Topology)) Topology { t := ok; f(&t); return t }
	tests := []struct {
		name      string
		topo      Topology
		field     string
		reasonHas string
	}{
		{"tp zero", with(func(t *Topology) { t.TPSize = 0 }), "tp-size", "at least 1"},
		{"pp negative", with(func(t *Topology) { t.PPSize = -1 }), "pp-size", "at least 1"},
		{"nnodes zero", with(func(t *Topology) { t.NNodes = 0 }), "nnodes", "at least 1"},
		{"node rank negative", with(func(t *Topology) { t.NodeRank = -1 }), "node-rank", "negative"},
		{"node rank past the end", with(func(t *Topology) { t.NNodes = 2; t.TPSize = 4; t.NodeRank = 2 }), "node-rank", "less than nnodes (2)"},
		{"base negative", with(func(t *Topology) { t.BaseGPUID = -2 }), "base-gpu-id", "negative"},
		{"step zero", with(func(t *Topology) { t.GPUIDStep = 0 }), "gpu-id-step", "at least 1"},
		{"tp not divisible by nodes per stage", with(func(t *Topology) { t.TPSize = 3; t.NNodes = 2 }), "tp-size", "not a multiple"},
		{"nnodes not a multiple of pp", with(func(t *Topology) { t.PPSize = 2; t.NNodes = 3 }), "nnodes", "not a multiple of pp-size"},
		{"pp not a multiple of nnodes", with(func(t *Topology) { t.PPSize = 3; t.NNodes = 2 }), "pp-size", "not a multiple of nnodes"},
		{"gpu list too short", with(func(t *Topology) { t.GPUs = []int{0, 1, 2} }), "gpus", "lists 3 GPUs but this node hosts 4 ranks"},
		{"gpu list too long", with(func(t *Topology) { t.GPUs = []int{0, 1, 2, 3, 4} }), "gpus", "lists 5 GPUs"},
		{"gpu list duplicate", with(func(t *Topology) { t.GPUs = []int{0, 1, 1, 3} }), "gpus", "GPU 1 would host two ranks (tp 1 pp 0 and tp 2 pp 0)"},
		{"gpu list negative", with(func(t *Topology) { t.GPUs = []int{0, -1, 2, 3} }), "gpus", "not in [0, 65536]"},
		{"gpu list huge", with(func(t *Topology) { t.GPUs = []int{0, 1 << 40, 2, 3} }), "gpus", "not in [0, 65536]"},
		// Huge sizes are refused before Place sizes anything by them:
		// 1e9 ranks would be a 32 GB slice, 4294967295² overflows int.
		{"tp huge", with(func(t *Topology) { t.TPSize = 1_000_000_000 }), "tp-size", "more than 1048576"},
		{"tp and pp at u32 max", with(func(t *Topology) { t.TPSize = 4294967295; t.PPSize = 4294967295 }), "tp-size", "more than"},
		{"nnodes huge", with(func(t *Topology) { t.NNodes = 1 << 40 }), "nnodes", "more than"},
		{"more ranks than a node has GPUs", with(func(t *Topology) { t.TPSize = 1024; t.PPSize = 2 }), "tp-size", "2048 ranks"},
		{"base huge", with(func(t *Topology) { t.BaseGPUID = 1 << 62 }), "base-gpu-id", "more than"},
		{"step huge", with(func(t *Topology) { t.GPUIDStep = 1 << 62 }), "gpu-id-step", "more than"},
		{"gpu list with base", with(func(t *Topology) { t.GPUs = []int{0, 1, 2, 3}; t.BaseGPUID = 1 }), "gpus", "replaces base-gpu-id"},
		{"gpu list with step", with(func(t *Topology) { t.GPUs = []int{0, 1, 2, 3}; t.GPUIDStep = 2 }), "gpus", "replaces base-gpu-id"},
		// SGLang's formula does not multiply the PP term by the step, so a
		// step with two stages on a node puts two ranks on one GPU.
		{"step collides across stages", Topology{TPSize: 2, PPSize: 2, NNodes: 1, GPUIDStep: 2}, "gpus", "GPU 2 would host two ranks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Place(tc.topo)
			if !errors.Is(err, ErrInvalidTopology) {
				t.Fatalf("Place(%+v) = %v, want ErrInvalidTopology", tc.topo, err)
			}
			var te *TopologyError
			if !errors.As(err, &te) {
				t.Fatalf("error %v is not a *TopologyError", err)
			}
			if te.Field != tc.field || !strings.Contains(te.Reason, tc.reasonHas) {
				t.Fatalf("got field %q reason %q, want field %q reason containing %q", te.Field, te.Reason, tc.field, tc.reasonHas)
			}
		})
	}
}

func TestParseGPUList(t *testing.T) {
	got, err := ParseGPUList(" 0, 1,2 ,3")
	if err != nil || !reflect.DeepEqual(got, []int{0, 1, 2, 3}) {
		t.Fatalf("ParseGPUList = %v, %v", got, err)
	}
	for _, bad := range []string{"", " ", "0,,1", "0,a", "1,2,"} {
		if _, err := ParseGPUList(bad); !errors.Is(err, ErrInvalidTopology) {
			t.Errorf("ParseGPUList(%q) = %v, want ErrInvalidTopology", bad, err)
		}
	}
}

func TestRankString(t *testing.T) {
	if got := (Rank{GPUID: 3, TPRank: 1, PPRank: 2}).String(); got != "gpu 3 tp 1 pp 2" {
		t.Fatalf("String = %q", got)
	}
}
