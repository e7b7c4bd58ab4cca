package daemonfile

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

func TestReadyRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "GPU-1.ready.json")
	want := Ready{
		PID: 4242, StartTime: 987654321, DeviceUUID: "GPU-1", Socket: "/run/wcache/GPU-1.sock",
		Backend: "mock", Model: "/models/llama", ConfigDigest: "sha256:ab", Version: "0.1.0", CreatedUnixMS: 1700000000123,
	}
	if err := WriteReady(path, want); err != nil {
		t.Fatalf("WriteReady: %v", err)
	}
	got, err := ReadReady(path)
	if err != nil {
		t.Fatalf("ReadReady: %v", err)
	}
	if got != want {
		t.Fatalf("round trip: got %+v, want %+v", got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("ready file mode %s, want -rw-------", fi.Mode())
	}

	// The wire names are part of the discovery contract (Python reads them).
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	wantKeys := []string{"backend", "config_digest", "created_unix_ms", "device_uuid", "gpu", "model", "pid", "socket", "start_time", "version"}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("ready file keys %v, want %v", keys, wantKeys)
	}

	// Overwrite in place; no temporary file is left behind.
	want.PID = 4343
	if err := WriteReady(path, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadReady(path); got.PID != 4343 {
		t.Fatalf("after overwrite pid = %d", got.PID)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries after writes, want only the ready file", len(entries))
	}
}

func TestWriteReadyFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ready.json")
	if err := os.Mkdir(path, 0o700); err != nil { // rename over a directory fails
		t.Fatal(err)
	}
	if err := WriteReady(path, Ready{PID: 1}); err == nil {
		t.Fatal("WriteReady over a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || !entries[0].IsDir() {
		t.Fatalf("failed write left %v", entries)
	}
	if err := WriteReady(filepath.Join(dir, "missing", "r.json"), Ready{PID: 1}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("write into a missing directory: %v", err)
	}
}

func TestReadReadyErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadReady(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
	for name, content := range map[string]string{
		"garbage": "not json",
		"pid0":    `{"pid":0,"device_uuid":"GPU-1"}`,
		"neg":     `{"pid":-5}`,
		"array":   `[1,2]`,
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadReady(path); !errors.Is(err, ErrMalformedReady) {
			t.Errorf("%s: err = %v, want ErrMalformedReady", name, err)
		}
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxReadySize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReady(big); !errors.Is(err, ErrMalformedReady) {
		t.Fatalf("oversized: %v", err)
	}
	// Unknown fields from newer daemons are ignored.
	fwd := filepath.Join(dir, "fwd")
	if err := os.WriteFile(fwd, []byte(`{"pid":7,"start_time":9,"future":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadReady(fwd); err != nil || r.PID != 7 || r.StartTime != 9 {
		t.Fatalf("forward-compatible read: %+v, %v", r, err)
	}
}
