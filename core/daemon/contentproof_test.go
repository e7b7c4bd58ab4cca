package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
	"github.com/wcache/wcache/sdk/filedigest"
)

// TestContentProofRules: what the daemon's content check
// (contentProofStatus) answers to each proof an attach can carry, through
// the real service on its socket, for a generation loaded from files under
// the default policies.
func TestContentProofRules(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	rpc := r.rawRPC(t)
	attach := func(proof *daemonv1.ContentProof) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := rpc.Attach(ctx, &daemonv1.AttachRequest{Config: r.d.Info().Config.ToProto(), Content: proof})
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}
	own := r.d.Info().Content
	// copies: the same bytes elsewhere (other identities), with and without digests.
	dir := filepath.Join(f.dir, "copy")
	safetensorstest.CopyCheckpoint(t, f.model.Dir, dir)
	var copies []cacheconfig.FileContent
	for _, rec := range own {
		p := filepath.Join(dir, rec.Name)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, cacheconfig.FileContent{Name: rec.Name, Path: p, Identity: safetensors.StampOf(st)})
	}
	withDigests := func(fs []cacheconfig.FileContent) []cacheconfig.FileContent {
		out := slices.Clone(fs)
		for i := range out {
			d, err := filedigest.File(context.Background(), out[i].Path, filedigest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			out[i].Digest = d
		}
		return out
	}
	wrongSecond := withDigests(copies)
	wrongSecond[1].Digest = wrongSecond[0].Digest
	extra := append(slices.Clone(own), cacheconfig.FileContent{Name: "model-rank-9.safetensors", Path: "/x/model-rank-9.safetensors",
		Identity: safetensors.Stamp{Size: 1}})
	proof := func(fs []cacheconfig.FileContent) *daemonv1.ContentProof {
		return &daemonv1.ContentProof{Files: cacheconfig.FilesToProto(fs)}
	}
	derived := proof(extra)
	derived.Derived = true
	names := func(fs []cacheconfig.FileContent) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Name)
		}
		return out
	}

	for _, tc := range []struct {
		name     string
		proof    *daemonv1.ContentProof
		code     codes.Code
		reason   daemonv1.ContentRefused_Reason
		file     string   // the detail's name
		unproven []string // REASON_UNKNOWN
	}{
		{name: "no proof", proof: nil, code: codes.FailedPrecondition, reason: daemonv1.ContentRefused_REASON_PROOF_REQUIRED},
		{name: "headers", proof: &daemonv1.ContentProof{Policy: "headers"}, code: codes.FailedPrecondition, reason: daemonv1.ContentRefused_REASON_POLICY},
		{name: "unknown policy", proof: &daemonv1.ContentProof{Policy: "trust-me"}, code: codes.InvalidArgument},
		{name: "the daemon's own files", proof: proof(own), code: codes.OK},
		{name: "a copy without digests", proof: proof(copies), code: codes.FailedPrecondition,
			reason: daemonv1.ContentRefused_REASON_UNKNOWN, file: own[0].Name, unproven: names(own)},
		{name: "a copy with its digests", proof: proof(withDigests(copies)), code: codes.OK},
		{name: "a copy with a wrong digest", proof: proof(wrongSecond), code: codes.FailedPrecondition,
			reason: daemonv1.ContentRefused_REASON_MISMATCH, file: own[1].Name},
		{name: "a file missing", proof: proof(own[:1]), code: codes.FailedPrecondition,
			reason: daemonv1.ContentRefused_REASON_MISMATCH, file: own[1].Name},
		{name: "an extra file named", proof: proof(extra), code: codes.FailedPrecondition,
			reason: daemonv1.ContentRefused_REASON_MISMATCH, file: "model-rank-9.safetensors"},
		{name: "an extra file derived", proof: derived, code: codes.OK},
		{name: "a memory copy by the owner", proof: &daemonv1.ContentProof{MemoryCopy: true}, code: codes.OK},
	} {
		err := attach(tc.proof)
		st, _ := status.FromError(err)
		if st.Code() != tc.code {
			t.Errorf("%s: code %v (%v), want %v", tc.name, st.Code(), err, tc.code)
			continue
		}
		if tc.code != codes.FailedPrecondition {
			continue
		}
		var cr *daemonv1.ContentRefused
		for _, d := range st.Details() {
			if c, ok := d.(*daemonv1.ContentRefused); ok {
				cr = c
			}
		}
		if cr == nil || cr.GetReason() != tc.reason || cr.GetName() != tc.file || !slices.Equal(cr.GetUnproven(), tc.unproven) ||
			!slices.Equal(cr.GetPolicies(), []string{"identity", "hash"}) {
			t.Errorf("%s: detail %v, want reason %v file %q unproven %v policies [identity hash]", tc.name, cr, tc.reason, tc.file, tc.unproven)
		}
	}
}
