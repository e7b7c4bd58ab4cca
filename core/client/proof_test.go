package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// twoShards generates the proof tests' checkpoint, two shards of hidden
// size 16, in dir/m and returns its path; a failure ends the test.
func twoShards(t *testing.T, dir string) (string, *safetensorstest.Result) {
	t.Helper()
	model := filepath.Join(dir, "m")
	res, err := safetensorstest.GenerateCheckpoint(model, safetensorstest.GenOptions{Shards: 2, HiddenSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	return model, res
}

// TestAttachDerivesAndSendsTheProof: Attach with a config whose model is a
// local checkpoint sends the identity of its files (a hidden file and
// other entries left out, as checkpoint_digest does); one whose model
// names nothing here sends no file. An older daemon that ignores the
// proof is checked on the client's side: its records for other files are
// a miss, and without files only a daemon that lists "headers" answers.
func TestAttachDerivesAndSendsTheProof(t *testing.T) {
	dir := pathstest.ShortDir(t)
	model, res := twoShards(t, dir)
	for _, extra := range []string{".partial.safetensors", "config.json"} {
		if err := os.WriteFile(filepath.Join(model, extra), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var got *daemonv1.ContentProof
	var records []*daemonv1.FileContent
	var policies []string
	path := serve(t, dir, &fakeDaemon{attach: func(req *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
		got = req.GetContent()
		ev := manifestEvent()
		ev.GetManifest().Files, ev.GetManifest().ContentPolicies = records, policies
		if err := s.Send(ev); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	}})
	attach := func(m string) error {
		cfg := cacheconfig.Default()
		cfg.Model = m
		a, err := Attach(context.Background(), BySocket(path), cfg, Options{Content: ContentOptions{NoCache: true}})
		if err == nil {
			a.Lease.Close()
		}
		return err
	}

	// The daemon's own files: proven by identity on both sides.
	for _, f := range res.Files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, cacheconfig.FileContent{Name: filepath.Base(f), Path: f, Digest: "sha256-tree-1m:x",
			Identity: safetensors.StampOf(st)}.ToProto())
	}
	if err := attach(model); err != nil {
		t.Fatalf("the daemon's own files: %v", err)
	}
	var names []string
	for _, f := range got.GetFiles() {
		names = append(names, f.GetName())
		if f.GetIno() == 0 || f.GetSize() == 0 {
			t.Errorf("file %s sent without its identity: %v", f.GetName(), f)
		}
	}
	want := []string{filepath.Base(res.Files[0]), filepath.Base(res.Files[1])}
	slices.Sort(want)
	if got.GetPolicy() != "identity" || !slices.Equal(names, want) {
		t.Errorf("proof = policy %q files %v, want identity %v", got.GetPolicy(), names, want)
	}

	// A copy (other identities): an older daemon served it, the client refuses.
	copyDir := filepath.Join(dir, "copy")
	safetensorstest.CopyCheckpoint(t, model, copyDir)
	if err := attach(copyDir); !errors.Is(err, cacheconfig.ErrContentUnknown) {
		t.Errorf("a copy against a daemon that ignored the proof: want ErrContentUnknown, got %v", err)
	}

	// No files: nothing sent; refused unless the daemon lists headers.
	if err := attach("acme/nowhere"); !errors.Is(err, cacheconfig.ErrContentUnknown) || len(got.GetFiles()) != 0 {
		t.Errorf("no files, default policies: want ErrContentUnknown and no file sent, got %v (%d files)", err, len(got.GetFiles()))
	}
	policies = []string{"identity", "hash", "headers"}
	if err := attach("acme/nowhere"); err != nil {
		t.Errorf("no files, a daemon that allows headers: %v", err)
	}
}

// TestAttachRetriesAfterHashingWhatTheDaemonNamed: under "hash", a
// REASON_UNKNOWN refusal naming files makes the client hash those (and
// only those) and attach once more with their digests.
func TestAttachRetriesAfterHashingWhatTheDaemonNamed(t *testing.T) {
	dir := pathstest.ShortDir(t)
	_, res := twoShards(t, dir)
	named := filepath.Base(res.Files[1])
	var proofs []*daemonv1.ContentProof
	path := serve(t, dir, &fakeDaemon{attach: func(req *daemonv1.AttachRequest, s daemonv1.Daemon_AttachServer) error {
		proofs = append(proofs, req.GetContent())
		if len(proofs) == 1 {
			return contentRefusedStatus(named)
		}
		ev := manifestEvent()
		ev.GetManifest().ContentPolicies = []string{"identity", "hash", "headers"}
		// The daemon proved them: the records are those the client sent.
		ev.GetManifest().Files = req.GetContent().GetFiles()
		if err := s.Send(ev); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	}})
	cfg := cacheconfig.Default()
	cfg.Model = filepath.Join(dir, "m")
	cache := &DigestCache{Dir: filepath.Join(dir, "cache"), UID: os.Geteuid()}
	a, err := Attach(context.Background(), BySocket(path), cfg, Options{Content: ContentOptions{Policy: cacheconfig.PolicyHash, Cache: cache}})
	if err != nil {
		t.Fatal(err)
	}
	a.Lease.Close()
	if len(proofs) != 2 {
		t.Fatalf("attaches = %d, want 2 (refused, then with the digest)", len(proofs))
	}
	for _, f := range proofs[1].GetFiles() {
		if hashed := f.GetDigest() != ""; hashed != (f.GetName() == named) {
			t.Errorf("second proof: %s digest %q; only %s should have been hashed", f.GetName(), f.GetDigest(), named)
		}
	}
}

// contentRefusedStatus is a daemon's REASON_UNKNOWN refusal naming name.
func contentRefusedStatus(name string) error {
	st, err := status.New(codes.FailedPrecondition, "content not proven").WithDetails(&daemonv1.ContentRefused{
		Reason: daemonv1.ContentRefused_REASON_UNKNOWN, Name: name, Unproven: []string{name}, Policies: []string{"identity", "hash"}})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
