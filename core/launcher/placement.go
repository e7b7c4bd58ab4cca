package launcher

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidTopology is wrapped by every *TopologyError, so callers can test
// errors.Is(err, ErrInvalidTopology) without caring which field was wrong.
var ErrInvalidTopology = errors.New("invalid topology")

// TopologyError says which field of a Topology is wrong and why.
type TopologyError struct {
	Field  string // the flag-style name: "tp-size", "node-rank", "gpus", ...
	Reason string
}

func (e *TopologyError) Error() string {
	return fmt.Sprintf("invalid topology: %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidTopology) true.
func (e *TopologyError) Unwrap() error { return ErrInvalidTopology }

func topoErrorf(field, format string, args ...any) error {
	return &TopologyError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Topology is a TP x PP layout and where this node sits in it. It mirrors
// the engine flags (SGLang's --tp-size, --pp-size, --nnodes, --node-rank,
// --base-gpu-id, --gpu-id-step) so that the launcher places every rank on
// the GPU the engine will later run that rank on.
type Topology struct {
	TPSize   int // tensor-parallel size, >= 1
	PPSize   int // pipeline-parallel size, >= 1
	NNodes   int // nodes in the job, >= 1
	NodeRank int // this node, 0 <= NodeRank < NNodes

	// BaseGPUID is added to every computed GPU id (default 0).
	BaseGPUID int
	// GPUIDStep spaces consecutive TP ranks on a node (>= 1; the engines'
	// default is 1). As in SGLang, the PP term is not multiplied by it.
	GPUIDStep int

	// GPUs, when not nil, names the GPU of each local rank explicitly,
	// indexed by local rank order (pp-major, then tp). It replaces the
	// formula; BaseGPUID must then be 0 and GPUIDStep 1.
	GPUs []int
}

// Rank is one local rank of the layout and the GPU ordinal it runs on.
type Rank struct {
	Local  int // index in local rank order (pp-major, then tp), from 0
	TPRank int
	PPRank int
	GPUID  int // the device ordinal as this process sees it
}

// String is "gpu G tp T pp P", the prefix used in logs and errors.
func (r Rank) String() string {
	return fmt.Sprintf("gpu %d tp %d pp %d", r.GPUID, r.TPRank, r.PPRank)
}

// PerNode is how the ranks of a Topology split across nodes.
type PerNode struct {
	PP         int // pp_per_node = max(pp // nnodes, 1)
	TP         int // tp_per_node = tp // nnodes_per_pp
	NodesPerPP int // nnodes_per_pp = max(nnodes // pp, 1)
}

// Split computes the per-node sizes of t without validating it.
func (t Topology) Split() PerNode {
	nodesPerPP := max(t.NNodes/max(t.PPSize, 1), 1)
	return PerNode{
		PP:         max(t.PPSize/max(t.NNodes, 1), 1),
		TP:         t.TPSize / nodesPerPP,
		NodesPerPP: nodesPerPP,
	}
}

// Limits on a Topology, checked by Validate before anything is sized by
// them. No node has more GPUs than MaxLocalRanks; the other bounds keep
// every product and GPU id far from overflow.
const (
	// MaxLocalRanks bounds the ranks (daemons, GPUs) one node hosts.
	MaxLocalRanks = 1024
	// MaxSize bounds tp-size, pp-size and nnodes.
	MaxSize = 1 << 20
	// MaxGPUID bounds base-gpu-id, gpu-id-step and explicit GPU ids.
	MaxGPUID = 1 << 16
)

// Validate checks the sizes and ranks of t (not the explicit GPU list,
// which Place checks against the local rank count). Sizes above MaxSize,
// a base GPU id or step above MaxGPUID and more than MaxLocalRanks ranks on
// this node are refused, so that Place allocates nothing out of proportion.
// Every error is a *TopologyError.
func (t Topology) Validate() error {
	switch {
	case t.TPSize < 1:
		return topoErrorf("tp-size", "must be at least 1, got %d", t.TPSize)
	case t.PPSize < 1:
		return topoErrorf("pp-size", "must be at least 1, got %d", t.PPSize)
	case t.NNodes < 1:
		return topoErrorf("nnodes", "must be at least 1, got %d", t.NNodes)
	case t.NodeRank < 0:
		return topoErrorf("node-rank", "must not be negative, got %d", t.NodeRank)
	case t.NodeRank >= t.NNodes:
		return topoErrorf("node-rank", "must be less than nnodes (%d), got %d", t.NNodes, t.NodeRank)
	case t.BaseGPUID < 0:
		return topoErrorf("base-gpu-id", "must not be negative, got %d", t.BaseGPUID)
	case t.GPUIDStep < 1:
		return topoErrorf("gpu-id-step", "must be at least 1, got %d", t.GPUIDStep)
	case t.TPSize > MaxSize:
		return topoErrorf("tp-size", "%d is more than %d", t.TPSize, MaxSize)
	case t.PPSize > MaxSize:
		return topoErrorf("pp-size", "%d is more than %d", t.PPSize, MaxSize)
	case t.NNodes > MaxSize:
		return topoErrorf("nnodes", "%d is more than %d", t.NNodes, MaxSize)
	case t.BaseGPUID > MaxGPUID:
		return topoErrorf("base-gpu-id", "%d is more than %d", t.BaseGPUID, MaxGPUID)
	case t.GPUIDStep > MaxGPUID:
		return topoErrorf("gpu-id-step", "%d is more than %d", t.GPUIDStep, MaxGPUID)
	}
	// Nodes split either the pipeline stages (pp >= nnodes) or each stage's
	// TP group (nnodes > pp); anything else leaves ranks on no node or on a
	// node past the end.
	if t.PPSize >= t.NNodes {
		if t.PPSize%t.NNodes != 0 {
			return topoErrorf("pp-size", "pp-size %d is not a multiple of nnodes %d", t.PPSize, t.NNodes)
		}
	} else if t.NNodes%t.PPSize != 0 {
		return topoErrorf("nnodes", "nnodes %d is not a multiple of pp-size %d", t.NNodes, t.PPSize)
	}
	s := t.Split()
	if t.TPSize%s.NodesPerPP != 0 {
		return topoErrorf("tp-size", "tp-size %d is not a multiple of the nodes per pipeline stage (nnodes/pp = %d)",
			t.TPSize, s.NodesPerPP)
	}
	if n := s.PP * s.TP; n > MaxLocalRanks {
		return topoErrorf("tp-size", "this node would host %d ranks (%d pp x %d tp), more than the %d GPUs a node can have",
			n, s.PP, s.TP, MaxLocalRanks)
	}
	if t.GPUs != nil && (t.BaseGPUID != 0 || t.GPUIDStep != 1) {
		return topoErrorf("gpus", "an explicit GPU list replaces base-gpu-id and gpu-id-step; leave those at 0 and 1")
	}
	return nil
}

// Place returns the ranks this node hosts, in local rank order (pp-major,
// then tp), each with its GPU ordinal:
//
//	gpu_id = base_gpu_id + (pp_rank % pp_per_node) * tp_per_node
//	       + (tp_rank % tp_per_node) * gpu_id_step
//
// or t.GPUs[local] when an explicit list is given. It refuses an invalid
// topology, a GPU list whose length is not the local rank count, negative
// or out-of-range GPU ids and two ranks on one GPU (which the formula produces, for
// example, with gpu_id_step 2 and more than one pipeline stage per node).
// Every error is a *TopologyError.
func Place(t Topology) ([]Rank, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	s := t.Split()
	ppLo := s.PP * (t.NodeRank / s.NodesPerPP)
	tpLo := s.TP * (t.NodeRank % s.NodesPerPP)
	n := s.PP * s.TP
	if t.GPUs != nil && len(t.GPUs) != n {
		return nil, topoErrorf("gpus", "lists %d GPUs but this node hosts %d ranks (%d pp x %d tp)",
			len(t.GPUs), n, s.PP, s.TP)
	}
	ranks := make([]Rank, 0, n)
	owner := make(map[int]Rank, n)
	for pp := ppLo; pp < ppLo+s.PP; pp++ {
		for tp := tpLo; tp < tpLo+s.TP; tp++ {
			r := Rank{Local: len(ranks), TPRank: tp, PPRank: pp}
			if t.GPUs != nil {
				r.GPUID = t.GPUs[r.Local]
				if r.GPUID < 0 || r.GPUID > MaxGPUID {
					return nil, topoErrorf("gpus", "GPU id %d (position %d) is not in [0, %d]", r.GPUID, r.Local, MaxGPUID)
				}
			} else {
				r.GPUID = t.BaseGPUID + (pp%s.PP)*s.TP + (tp%s.TP)*t.GPUIDStep
			}
			if prev, dup := owner[r.GPUID]; dup {
				return nil, topoErrorf("gpus", "GPU %d would host two ranks (tp %d pp %d and tp %d pp %d)",
					r.GPUID, prev.TPRank, prev.PPRank, r.TPRank, r.PPRank)
			}
			owner[r.GPUID] = r
			ranks = append(ranks, r)
		}
	}
	return ranks, nil
}

// ParseGPUList parses "0,1,2,3" (spaces allowed) into GPU ids. Empty items
// and non-integers are refused; negative ids are refused by Place.
func ParseGPUList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, topoErrorf("gpus", "empty list")
	}
	parts := strings.Split(s, ",")
	ids := make([]int, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		id, err := strconv.Atoi(p)
		if err != nil {
			return nil, topoErrorf("gpus", "item %d (%q) is not an integer", i, p)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
