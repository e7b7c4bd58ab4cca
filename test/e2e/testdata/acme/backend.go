package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/sdk/names"
)

// Kind is acme's vendor handle kind; DataPrefix starts its Data.
const (
	Kind       = "x-acme-buf"
	DataPrefix = "acme-buf:v1:"
)

func options() []sdk.Option {
	return []sdk.Option{
		{Name: "devices", Type: sdk.OptionInt, Default: "1", Env: "ACME_DEVICES", Description: "number of acme devices"},
		{Name: "memory", Type: sdk.OptionSize, Default: "256MiB", Env: "ACME_MEMORY", Description: "capacity of every device"},
		{Name: "dir", Type: sdk.OptionString, Env: "ACME_DIR", Description: "folder of the device buffers (required)"},
		{Name: "uuid-tag", Type: sdk.OptionString, Default: "0000", Env: "ACME_UUID_TAG",
			Description: "hex digits in every device UUID: ACME-<tag>-<ordinal>"},
	}
}

// UUID is the UUID of acme device ordinal with tag.
func UUID(tag string, ordinal int) string { return fmt.Sprintf("ACME-%s-%04d", tag, ordinal) }

// backend is an sdk/mock.Memory whose handles are x-acme-buf.
type backend struct {
	*mock.Memory
}

func newBackend(logger hclog.Logger, cfg sdk.Config) (sdk.Backend, error) {
	dir := cfg.Value("dir")
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "option dir (or ACME_DIR) must name an absolute folder, not %q", dir)
	}
	n := int(cfg.Int("devices"))
	if n < 1 || n > 64 {
		return nil, sdk.Errorf(sdk.ErrInvalidArgument, "option devices=%d: want 1 to 64", n)
	}
	uuids := make([]string, n)
	for i := range uuids {
		uuids[i] = UUID(cfg.Value("uuid-tag"), i)
	}
	mem, err := mock.NewMemory(mock.MemoryOptions{Dir: dir, DeviceUUIDs: uuids, Memory: cfg.Size("memory")})
	if err != nil {
		return nil, err
	}
	logger.Info("acme backend ready", "devices", n, "memory_per_device", cfg.Size("memory"),
		"memory_source", string(cfg.Source("memory")), "pid", os.Getpid())
	return backend{mem}, nil
}

func (b backend) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{Name: "acme", Version: "1.2.3", Platform: "acme", HandleKinds: []string{Kind}}, nil
}

func (b backend) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	h, err := b.Memory.Export(ctx, id)
	if err != nil {
		return sdk.Handle{}, err
	}
	return sdk.Handle{Kind: Kind, Data: []byte(DataPrefix + string(h.Data)), Size: h.Size}, nil
}

func (b backend) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	if _, err := b.DeviceUUID(ctx, ordinal); err != nil {
		return 0, err
	}
	if h.Kind != Kind {
		return 0, sdk.Errorf(sdk.ErrUnsupported, "handle kind %q (acme imports %s)", h.Kind, Kind)
	}
	path, ok := strings.CutPrefix(string(h.Data), DataPrefix)
	if !ok {
		return 0, sdk.Errorf(sdk.ErrInvalidArgument, "%s handle data %s does not start with %q", Kind,
			strconv.QuoteToASCII(string(h.Data)), DataPrefix)
	}
	return b.Memory.Import(ctx, ordinal, sdk.Handle{Kind: names.KindPosixShm, Data: []byte(path), Size: h.Size})
}
