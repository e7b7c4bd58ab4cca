// Command mockplugin is the test plugin of core/pluginhost, built there as
// wcache-backend-mock: an sdk/mock.Memory of two devices served by
// sdk/plugin.Serve, so that the host is tested against the SDK alone and never
// against a shipped plugin. The environment configures it:
//
//	WCACHE_MOCK_DIR               folder of the allocation files (required)
//	WCACHE_MOCK_MEMORY            bytes per device (sdk.ParseSize; default 64MiB)
//	WCACHE_MOCK_CRASH_LOAD_AFTER  exit with status 3, logging "injected crash
//	                              during load", once Loads copied this many bytes
//	WCACHE_MOCK_PANIC_DIGEST      "panic": Digest panics (recovered by plugin.Serve);
//	                              "fatal": Digest calls sdk.Fatal;
//	                              "crash": Digest panics on a goroutine of its own
//	                              (nothing can recover that: the process dies)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/sdk/plugin"
)

// crashExitCode is the exit status of an injected crash
// (pluginhost_test.go's testCrashExitCode).
const crashExitCode = 3

// init locks main to the main thread, where plugin.Serve replaces the
// host's parent-death signal (WithCloseOnTermination).
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(plugin.Serve("mock", newBackend, plugin.WithCloseOnTermination()))
}

// closingBackend is a wrapped Memory that still closes it.
type closingBackend struct {
	*mock.Backend
	io.Closer
}

func newBackend(logger hclog.Logger, _ sdk.Config) (sdk.Backend, error) {
	dir := os.Getenv("WCACHE_MOCK_DIR")
	if dir == "" {
		return nil, errors.New("WCACHE_MOCK_DIR is not set")
	}
	memory := uint64(64 << 20)
	if v := os.Getenv("WCACHE_MOCK_MEMORY"); v != "" {
		n, err := sdk.ParseSize(v)
		if err != nil {
			return nil, fmt.Errorf("WCACHE_MOCK_MEMORY=%q: %w", v, err)
		}
		memory = n
	}
	crashAfter := int64(-1)
	if v := os.Getenv("WCACHE_MOCK_CRASH_LOAD_AFTER"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("WCACHE_MOCK_CRASH_LOAD_AFTER=%q: %w", v, err)
		}
		crashAfter = n
	}
	mem, err := mock.NewMemory(mock.MemoryOptions{Dir: dir, Memory: memory, DeviceUUIDs: []string{
		"GPU-7e570000-0000-4000-8000-000000000000", "GPU-7e570000-0000-4000-8000-000000000001"}})
	if err != nil {
		return nil, err
	}
	logger.Debug("mock backend ready", "dir", dir, "memory_per_device", memory, "crash_load_after", crashAfter)
	b := mock.Wrap(mem)
	if crashAfter >= 0 {
		var loaded atomic.Int64
		b.LoadFunc = func(ctx context.Context, id sdk.AllocationID, extents []sdk.Extent, progress sdk.ProgressFunc) error {
			var last uint64
			return mem.Load(ctx, id, extents, func(done, total uint64) {
				if loaded.Add(int64(done-last)) >= crashAfter {
					logger.Error("injected crash during load", "allocation", id)
					os.Exit(crashExitCode)
				}
				last = done
				if progress != nil {
					progress(done, total)
				}
			})
		}
	}
	switch os.Getenv("WCACHE_MOCK_PANIC_DIGEST") {
	case "panic":
		b.DigestFunc = func(context.Context, sdk.AllocationID, []sdk.Range) ([][32]byte, error) {
			panic("injected panic in digest")
		}
	case "crash":
		b.DigestFunc = func(context.Context, sdk.AllocationID, []sdk.Range) ([][32]byte, error) {
			done := make(chan struct{})
			go func() { panic("injected crash in a goroutine") }()
			<-done
			return nil, nil
		}
	case "fatal":
		b.DigestFunc = func(context.Context, sdk.AllocationID, []sdk.Range) ([][32]byte, error) {
			sdk.Fatal(errors.New("injected driver failure"))
			return nil, nil
		}
	}
	return closingBackend{Backend: b, Closer: mem}, nil
}
