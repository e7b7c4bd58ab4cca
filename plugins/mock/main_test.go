package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wcache/wcache/plugins/mock/mockbackend"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/sdk/names"
)

// pluginEnv names the binary TestMain builds; an environment variable
// rather than a package variable keeps the package free of mutable globals.
const pluginEnv = "WCACHE_MOCK_TEST_PLUGIN"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// The plugin inherits this process's environment: the user's
	// WCACHE_MOCK_* variables are not the tests' (each test sets its own).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "WCACHE_MOCK_") {
			os.Unsetenv(k)
		}
	}
	dir, err := os.MkdirTemp("", "wcache-mock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	bin, err := backendtest.BuildPlugin(dir, "mock", ".", "CGO_ENABLED=0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Setenv(pluginEnv, bin)
	return m.Run()
}

// TestConformanceSubprocess runs the conformance suite through the real
// plugin binary: every instance is its own wcache-backend-mock process
// sharing one folder, so ExportImport/RoundTrip opens the handle in another
// process. Both handle kinds: memfd descriptors cross the plugin
// descriptor channel both ways, posix-shm paths the gRPC messages.
func TestConformanceSubprocess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shm")
	for _, kind := range []string{names.KindMemfd, names.KindPosixShm} {
		t.Run(kind, func(t *testing.T) {
			env := []string{mockbackend.EnvDir + "=" + dir, mockbackend.EnvMemory + "=64MiB", mockbackend.EnvHandle + "=" + kind}
			backendtest.Run(t, func(t *testing.T) sdk.Backend {
				return backendtest.StartPlugin(t, os.Getenv(pluginEnv), env...)
			}, backendtest.Options{})
		})
	}
}

func TestRunByHandExplains(t *testing.T) {
	backendtest.CheckRunByHand(t, os.Getenv(pluginEnv), "docs/mock-backend.md")
}

// TestPeerCopyFailingMidCopyLeavesNothing copies a 24 MiB arena of one
// plugin process into another whose copy fails after 8 MiB
// (WCACHE_MOCK_FAIL_PEER_COPY_AFTER): the error names the knob, the
// copier's device has all its memory free again (no half arena), it still
// serves, and the source is untouched.
func TestPeerCopyFailingMidCopyLeavesNothing(t *testing.T) {
	for _, kind := range []string{names.KindMemfd, names.KindPosixShm} {
		t.Run(kind, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "shm")
			env := []string{mockbackend.EnvDir + "=" + dir, mockbackend.EnvMemory + "=64MiB", mockbackend.EnvHandle + "=" + kind}
			src := backendtest.StartPlugin(t, os.Getenv(pluginEnv), env...)
			failing := backendtest.StartPlugin(t, os.Getenv(pluginEnv), append(env, mockbackend.EnvFailPeerCopyAfter+"=8MiB")...)

			const size = 24 << 20
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i*7 + i>>13)
			}
			id, h := backendtest.ExportData(t, src, size, data)
			before := backendtest.FreeMemory(t, failing, 0)

			_, err := sdk.PeerCopy(ctx, failing, sdk.PeerCopyRequest{Ordinal: 0, Source: h}, nil)
			if err == nil || !strings.Contains(err.Error(), mockbackend.EnvFailPeerCopyAfter) {
				t.Fatalf("PeerCopy with the knob: %v, want the injected failure", err)
			}
			if after := backendtest.FreeMemory(t, failing, 0); after != before {
				t.Fatalf("free memory %d after the failed copy, %d before: a half arena was left", after, before)
			}
			// The copier still works: the same copy without the knob, on a
			// fresh plugin, gives the bytes; the source never changed.
			ok := backendtest.StartPlugin(t, os.Getenv(pluginEnv), env...)
			res, err := sdk.PeerCopy(ctx, ok, sdk.PeerCopyRequest{Ordinal: 0, Source: h}, nil)
			if err != nil {
				t.Fatalf("PeerCopy: %v", err)
			}
			for off := uint64(0); off < size; off += sdk.MaxReadBytes {
				got, err := ok.Read(ctx, res.ID, off, min(sdk.MaxReadBytes, size-off))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, data[off:off+uint64(len(got))]) {
					t.Fatalf("copied bytes at %d differ", off)
				}
				src, err := src.Read(ctx, id, off, uint64(len(got)))
				if err != nil || !bytes.Equal(src, got) {
					t.Fatalf("source bytes at %d changed (%v)", off, err)
				}
			}
			if res.Stats.Path != "memcpy" || res.Stats.Bytes != size {
				t.Errorf("stats %+v", res.Stats)
			}
		})
	}
}
