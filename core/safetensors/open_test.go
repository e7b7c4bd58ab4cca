package safetensors_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/safetensors"
)

// TestOpenRefusesFIFO: a FIFO named like a checkpoint file (or its index)
// must be refused at once. A plain open(2) of a FIFO without a writer
// blocks forever.
func TestOpenRefusesFIFO(t *testing.T) {
	for _, name := range []string{"model.safetensors", "model.safetensors.index.json"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fifo := filepath.Join(dir, name)
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatalf("mkfifo: %v", err)
			}
			// A symlink to the FIFO, as a Hugging Face snapshot links to
			// its blobs, is refused too.
			link := filepath.Join(t.TempDir(), name)
			if err := os.Symlink(fifo, link); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{fifo, link} {
				done := make(chan error, 1)
				go func() {
					var err error
					if strings.HasSuffix(p, ".json") {
						_, err = safetensors.ReadIndex(p)
					} else {
						_, err = safetensors.Open(p)
					}
					done <- err
				}()
				select {
				case err := <-done:
					if err == nil || !strings.Contains(err.Error(), "not a regular file") {
						t.Errorf("%s: err = %v, want a not-a-regular-file error", p, err)
					}
				case <-time.After(5 * time.Second):
					// Unblock the stuck open so the test binary can exit.
					if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						w.Close()
					}
					t.Fatalf("%s: still blocked in open after 5s", p)
				}
			}
			// The directory forms go through the same open.
			done := make(chan error, 1)
			go func() { _, err := safetensors.OpenCheckpoint(dir); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("OpenCheckpoint of a directory with a FIFO succeeded")
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("OpenCheckpoint still blocked after 5s")
			}
		})
	}
}
