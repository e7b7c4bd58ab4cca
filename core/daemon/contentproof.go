package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/safetensors"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
	"github.com/wcache/wcache/sdk/filedigest"
)

// maxEchoedProofLen bounds a client-supplied string (a path, a digest)
// echoed in a refusal.
const maxEchoedProofLen = 256

// contentProofStatus is the daemon's content policy for one attach
// (docs/cacheconfig.md, "Content identity"): whether the proof an attach
// carries (AttachRequest.content) lets peer p have the bytes of
// generation g. It is the only place the daemon decides this; it runs
// under the registry's lock, before a lease exists, and reads no file.
//
//   - memory_copy (a successor daemon, a sibling daemon's fill): answered
//     to the daemon's own uid and root, PERMISSION_DENIED otherwise;
//   - no proof, no files, or policy "headers": answered only where g's
//     content policies list "headers", else FAILED_PRECONDITION with a
//     ContentRefused detail (REASON_PROOF_REQUIRED, or REASON_POLICY for
//     an explicit "headers") naming the policies and what to send;
//   - a policy g does not list: REASON_POLICY;
//   - files: cacheconfig.MatchContent of g's content records against
//     them, a file proven by the daemon's identity, by a hub blob name
//     equal to the SHA-256 the daemon verified for it, or by the digest
//     the client sent. A missing, extra or other file is
//     REASON_MISMATCH; files proven by none of these REASON_UNKNOWN,
//     every one named (under "hash" the client hashes them and attaches
//     again). A generation without content records (a publication that
//     named no files) proves nothing: REASON_UNKNOWN.
//
// The daemon cannot see the client's disk: the proof is the client's
// claim about its own files. What this enforces is that no client gets
// bytes without having made the claim the policy asks for.
func contentProofStatus(g *generation, proof *daemonv1.ContentProof, p PeerInfo) error {
	m := g.Manifest
	policies := cacheconfig.PoliciesFromStrings(m.policies)
	if len(policies) == 0 {
		policies = cacheconfig.DefaultDaemonPolicies
	}
	refuse := func(r *daemonv1.ContentRefused, msg string) error {
		r.Generation, r.Policies = g.ID, cacheconfig.PolicyStrings(policies)
		st := status.New(codes.FailedPrecondition, fmt.Sprintf("generation %d (%s): %s", g.ID, g.Config.Model, msg))
		withDetail, err := st.WithDetails(r)
		if err != nil {
			return st.Err()
		}
		return withDetail.Err()
	}
	if proof.GetMemoryCopy() {
		if p.UID == uint32(os.Getuid()) || p.UID == 0 {
			return nil
		}
		return status.Errorf(codes.PermissionDenied,
			"a memory-copy attach (a successor or sibling daemon) is answered to the daemon's own uid %d and root only, not uid %d",
			os.Getuid(), p.UID)
	}
	policy, err := cacheconfig.ParsePolicy(proof.GetPolicy())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	headersOK := cacheconfig.Allows(policies, cacheconfig.PolicyHeaders)
	switch {
	case policy == cacheconfig.PolicyHeaders && headersOK, len(proof.GetFiles()) == 0 && headersOK:
		return nil
	case policy == cacheconfig.PolicyHeaders:
		return refuse(&daemonv1.ContentRefused{Reason: daemonv1.ContentRefused_REASON_POLICY},
			fmt.Sprintf("content policy \"headers\" refused: this generation allows %v; prove the files with \"identity\" "+
				"or \"hash\" (start the daemon with --content-policies identity,hash,headers to allow headers: unsafe for fine-tunes)", policies))
	case len(proof.GetFiles()) == 0:
		return refuse(&daemonv1.ContentRefused{Reason: daemonv1.ContentRefused_REASON_PROOF_REQUIRED},
			fmt.Sprintf("content proof required: this generation allows content policies %v, not \"headers\", so an attach "+
				"must name the checkpoint files it would load (AttachRequest.content: wcache.attach(files=…) or a cfg.model "+
				"that is a local directory or a cached hub id; client.AttachFiles; wcache attach --model DIR); "+
				"start the daemon with --content-policies identity,hash,headers to answer attaches without one (unsafe for fine-tunes)",
				policies))
	case !cacheconfig.Allows(policies, policy):
		return refuse(&daemonv1.ContentRefused{Reason: daemonv1.ContentRefused_REASON_POLICY},
			fmt.Sprintf("content policy %q refused: this generation allows %v", policy, policies))
	}
	daemon := cacheconfig.FilesWithSHA256(m.content, m.blobs.list())
	byName := make(map[string]cacheconfig.FileContent, len(daemon))
	for _, f := range daemon {
		byName[f.Name] = f
	}
	claimed := make(map[string]string, len(proof.GetFiles()))
	client := make([]cacheconfig.FileContent, 0, len(proof.GetFiles()))
	for _, f := range proof.GetFiles() {
		if _, loaded := byName[f.GetName()]; proof.GetDerived() && !loaded {
			continue // listed from the model's directory, not loaded by this generation
		}
		claimed[f.GetName()] = f.GetDigest()
		client = append(client, cacheconfig.FileContentFromProto(f))
	}
	blobs := make(map[string]string, len(proof.GetBlobs()))
	for _, b := range proof.GetBlobs() {
		blobs[b.GetName()] = b.GetSha256()
	}
	// An unproven file does not stop the comparison: it is noted and
	// passed, so that a mismatch later in name order is still the answer,
	// and a REASON_UNKNOWN names every file the client has to hash.
	var unproven []string
	prove := func(name, _ string, _ safetensors.Stamp) (string, bool, error) {
		rec := byName[name]
		if sum := blobs[name]; sum != "" && sum == rec.SHA256 {
			return rec.Digest, true, nil
		}
		// A digest in another algorithm than the record's (a client
		// whose cache holds only an older SHA-256 tree) proves nothing
		// either way: the file is unproven, not other bytes.
		if d := claimed[name]; d != "" && filedigest.SameAlgorithm(d, rec.Digest) {
			return d, true, nil
		}
		unproven = append(unproven, name)
		return rec.Digest, true, nil
	}
	err = cacheconfig.MatchContent(daemon, client, prove)
	var mm *cacheconfig.ContentMismatchError
	var unknown *cacheconfig.ContentUnknownError
	switch {
	case errors.As(err, &mm):
		return refuse(&daemonv1.ContentRefused{Reason: daemonv1.ContentRefused_REASON_MISMATCH, Name: echo(mm.Name),
			ClientPath: echo(mm.ClientPath), DaemonDigest: mm.Daemon, ClientDigest: echo(mm.Client)}, echo(mm.Error()))
	case errors.As(err, &unknown): // no content records
		return refuse(&daemonv1.ContentRefused{Reason: daemonv1.ContentRefused_REASON_UNKNOWN}, unknown.Error()+
			": no client can prove its files; load from disk (or allow \"headers\")")
	case err != nil:
		return status.Errorf(codes.Internal, "content check: %v", err)
	case len(unproven) > 0:
		first := unproven[0]
		var path string
		for _, f := range proof.GetFiles() {
			if f.GetName() == first {
				path = f.GetPath()
			}
		}
		names := make([]string, len(unproven))
		for i, n := range unproven {
			names[i] = echo(n)
		}
		return refuse(&daemonv1.ContentRefused{Reason: daemonv1.ContentRefused_REASON_UNKNOWN, Name: names[0],
			ClientPath: echo(path), DaemonDigest: byName[first].Digest, Unproven: names},
			fmt.Sprintf("%v (%d file(s) in all: %s): under \"identity\" load from disk; under \"hash\" hash them and attach again",
				&cacheconfig.ContentUnknownError{Name: names[0], ClientPath: echo(path),
					Why: "not the file this generation was loaded from, and the attach sent no digest or trusted hub blob name for it"},
				len(names), strings.Join(names[:min(len(names), 8)], ", ")))
	}
	return nil
}

// echo bounds a client-supplied string for a refusal.
func echo(s string) string {
	if len(s) > maxEchoedProofLen {
		return strings.ToValidUTF8(s[:maxEchoedProofLen], "") + "…"
	}
	return s
}
