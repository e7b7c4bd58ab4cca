package hubcache

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestBlobNames: a snapshot file resolves to its blob's claimed SHA-256;
// only a blob of this user (or root) that others cannot write is trusted;
// VerifyBlob tells a true name from a false one.
func TestBlobNames(t *testing.T) {
	root := filepath.Join(t.TempDir(), "models--acme--tiny")
	data := []byte("weights")
	good := fmt.Sprintf("%x", sha256.Sum256(data))
	bad := fmt.Sprintf("%x", sha256.Sum256([]byte("other")))
	snap := filepath.Join(root, "snapshots", "c0ffee")
	for _, d := range []string{filepath.Join(root, "blobs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, blob := range map[string]string{"a.safetensors": good, "b.safetensors": bad} {
		if err := os.WriteFile(filepath.Join(root, "blobs", blob), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, name)); err != nil {
			t.Fatal(err)
		}
	}
	a := filepath.Join(snap, "a.safetensors")
	sum, resolved, ok := BlobSHA256(a)
	if !ok || sum != good || resolved != filepath.Join(root, "blobs", good) {
		t.Fatalf("BlobSHA256(%s) = %q, %q, %v", a, sum, resolved, ok)
	}
	if _, _, ok := BlobSHA256(filepath.Join(root, "snapshots")); ok {
		t.Error("a directory is not a blob")
	}
	if sum, _, ok := TrustedBlob(a, os.Geteuid()); !ok || sum != good {
		t.Errorf("TrustedBlob of a private blob: %q, %v", sum, ok)
	}
	if err := os.Chmod(resolved, 0o664); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := TrustedBlob(a, os.Geteuid()); ok {
		t.Error("a blob its group can write is trusted")
	}
	if err := os.Chmod(resolved, 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory on the blob's way that others can write: they could
	// rename another blob (or a file of theirs) to this name.
	for _, dir := range []string{filepath.Join(root, "blobs"), root, snap} {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := TrustedBlob(a, os.Geteuid()); ok {
			t.Errorf("a blob reached through %s, writable by others, is trusted", dir)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(root, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := TrustedBlob(a, os.Geteuid()); ok {
			t.Error("a blob in a repository folder of another user is trusted")
		}
		if err := os.Chown(root, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := TrustedBlob(a, os.Geteuid()); !ok {
		t.Error("the blob restored to a safe place is not trusted")
	}
	if err := os.Chmod(resolved, 0o664); err != nil {
		t.Fatal(err)
	}
	if err := VerifyBlob(context.Background(), resolved, good); err != nil {
		t.Errorf("VerifyBlob of a true name: %v", err)
	}
	_, badPath, _ := BlobSHA256(filepath.Join(snap, "b.safetensors"))
	if err := VerifyBlob(context.Background(), badPath, bad); !errors.Is(err, ErrBlobMismatch) {
		t.Errorf("VerifyBlob of a false name: %v, want ErrBlobMismatch", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := VerifyBlob(ctx, resolved, good); !errors.Is(err, context.Canceled) {
		t.Errorf("VerifyBlob after cancel: %v", err)
	}
}
