// Package probe is wcache-cuda-probe: it loads safetensors files into one
// device allocation with the CUDA backend, in-process (no daemon, no
// plugin), prints the cuda-ipc handle and where each file landed as one
// JSON line, and keeps the allocation until its standard input closes.
//
// The GPU check uses it to let a PyTorch process rebuild tensors from the
// backend's handle without the daemon protocol (no grpcio needed), and to
// time the backend's host-to-device pipeline on its own.
package probe

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/wcache/wcache/plugins/cuda/cudabackend"
	"github.com/wcache/wcache/sdk"
)

// Alignment of each file's data in the allocation: torch views need the
// element alignment, and 4 KiB keeps O_DIRECT reads of whole files aligned
// to the destination too.
const Alignment = 4096

// Report is the JSON line the probe prints once the data is in place.
type Report struct {
	DeviceUUID  string  `json:"device_uuid"`
	GPUID       int     `json:"gpu_id"`
	HandleKind  string  `json:"handle_kind"`
	Handle      []byte  `json:"handle"` // base64 in JSON: the 64-byte CUipcMemHandle
	Size        uint64  `json:"size"`
	Bytes       uint64  `json:"bytes"`
	LoadSeconds float64 `json:"load_seconds"`
	GBPerSecond float64 `json:"gb_per_second"` // 1e9 bytes per second
	Files       []File  `json:"files"`
}

// File says where one file's data buffer sits in the allocation.
type File struct {
	Path       string `json:"path"`
	DataStart  int64  `json:"data_start"`
	Length     uint64 `json:"length"`
	DestOffset uint64 `json:"dest_offset"`
}

// Run is the command: wcache-cuda-probe [--gpu-id N] FILE.safetensors...
// The CUDA backend is configured by the WCACHE_CUDA_* variables read
// through getenv. It returns the exit status: 0 after stdin closed and the
// memory was freed, 1 on any failure (explained on stderr), 2 on bad usage.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("wcache-cuda-probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gpu := fs.Int("gpu-id", 0, "CUDA ordinal as this process sees it (CUDA_VISIBLE_DEVICES applies)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: wcache-cuda-probe [--gpu-id N] FILE.safetensors...\n"+
			"Loads the files into one allocation, prints a JSON report with the cuda-ipc handle,\n"+
			"and frees the memory when standard input closes.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if err := run(*gpu, fs.Args(), stdin, stdout, getenv); err != nil {
		fmt.Fprintln(stderr, "wcache-cuda-probe:", err)
		return 1
	}
	return 0
}

func run(gpu int, paths []string, stdin io.Reader, stdout io.Writer, getenv func(string) string) error {
	cfg, err := cudabackend.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	b, err := cudabackend.New(cfg, nil)
	if err != nil {
		return err
	}
	ctx := context.Background()
	rep := Report{GPUID: gpu, HandleKind: cudabackend.HandleKind}
	var extents []sdk.Extent
	var size uint64
	for _, p := range paths {
		start, fileSize, err := dataStart(p)
		if err != nil {
			return errors.Join(err, b.Close())
		}
		n := uint64(fileSize - start)
		rep.Files = append(rep.Files, File{Path: p, DataStart: start, Length: n, DestOffset: size})
		extents = append(extents, sdk.Extent{Path: p, FileOffset: uint64(start), Length: n, DestOffset: size})
		rep.Bytes += n
		size += (n + Alignment - 1) / Alignment * Alignment
	}
	if rep.DeviceUUID, err = b.DeviceUUID(ctx, gpu); err != nil {
		return errors.Join(err, b.Close())
	}
	id, _, err := b.Allocate(ctx, gpu, max(size, 1))
	if err != nil {
		return errors.Join(err, b.Close())
	}
	start := time.Now()
	if err := b.Load(ctx, id, extents, nil); err != nil {
		return errors.Join(err, b.Close())
	}
	rep.LoadSeconds = time.Since(start).Seconds()
	rep.GBPerSecond = float64(rep.Bytes) / rep.LoadSeconds / 1e9
	h, err := b.Export(ctx, id)
	if err != nil {
		return errors.Join(err, b.Close())
	}
	rep.Handle, rep.Size = h.Data, h.Size
	line, err := json.Marshal(rep)
	if err != nil {
		return errors.Join(err, b.Close())
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return errors.Join(err, b.Close())
	}
	// Keep the allocation until the importer is done: stdin closes.
	_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
	return errors.Join(b.Free(ctx, id), b.Close())
}
