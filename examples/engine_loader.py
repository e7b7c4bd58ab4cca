#!/usr/bin/env python3
"""A worked example: an inference engine's model loader that takes its weights from wcache.

On every (re)start the loader:

1. computes the CacheConfig it expects — the checkpoint digest of its model
   directory, its parallel layout, dtype, engine, device capability;
2. attaches to the daemon of the GPU it actually runs on (discovery by the
   GPU's UUID, never by rank);
3. puts the daemon's tensors into the model — zero-copy (the parameters alias
   the daemon's memory) or copied to where the model lives;
4. holds the lease for the life of the process;
5. falls back to reading the checkpoint from disk *only* on NoDaemonError.
   Every other error (unsafe socket, dead daemon, incompatible config) stops
   the engine: loading from disk would hide a deployment mistake.

Run it against a mock daemon (see docs/python-client.md, "Try it"):

    wcache serve --backend mock --gpu-id 0 --model /tmp/ckpt &
    examples/engine_loader.py --model /tmp/ckpt --device-uuid "$(wcache devices --backend mock --json | ...)" \\
        --device-capability mock

On a GPU node, leave out --device-uuid: the loader derives it from
torch.cuda.current_device() (or --device-index).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Dict, Optional, Tuple

import torch
from torch import nn

try:
    import wcache
except ImportError:  # running from a source checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src"))
    import wcache
from wcache.checkpoint import checkpoint_files, read_header
from wcache.dtypes import torch_dtype

log = logging.getLogger("engine_loader")


# --- 1. what the engine expects ----------------------------------------------------------------

def expected_config(model_dir: str, *, tp_size: int = 1, tp_rank: int = 0, pp_size: int = 1, pp_rank: int = 0,
                    dtype: str = "auto", device_capability: str = "", engine_name: str = "",
                    engine_version: str = "") -> wcache.CacheConfig:
    """The CacheConfig this engine process needs.

    checkpoint_digest reads only the safetensors headers (cheap even for a
    1 TB checkpoint) and makes the same weights match wherever they live.
    device_capability must be what the daemon's backend reports:
    wcache.device_capability(index) on a GPU ("9.0", "gfx942"). Every field
    must equal what the daemon was started with (`wcache serve --tp-size …
    --dtype … --engine-name …`): the daemon compares them all.
    """
    return wcache.CacheConfig(
        model=os.path.abspath(model_dir),
        checkpoint_digest=wcache.checkpoint_digest(model_dir),
        tp_size=tp_size, tp_rank=tp_rank, pp_size=pp_size, pp_rank=pp_rank,
        dtype=dtype, engine_name=engine_name, engine_version=engine_version,
        device_capability=device_capability,
    )


# --- 2. + 5. weights from the daemon, or from disk when there is none --------------------------

def load_from_disk(model_dir: str) -> Dict[str, torch.Tensor]:
    """The fallback: read every tensor of the checkpoint (copies into this process)."""
    out: Dict[str, torch.Tensor] = {}
    files, _ = checkpoint_files(model_dir)
    for path in files:
        raw, tensors = read_header(path)
        with open(path, "rb") as f:
            f.seek(8 + len(raw))
            data = bytearray(f.read())
        for name, (dt, shape, begin, end) in tensors.items():
            td = torch_dtype(dt, torch)
            chunk = data[begin:end]
            out[name] = torch.frombuffer(chunk, dtype=td).reshape(shape) if chunk else torch.empty(shape, dtype=td)
    return out


def weights(cfg: wcache.CacheConfig, *, socket: Optional[str] = None, device_uuid: Optional[str] = None,
            device_index: Optional[int] = None) -> Tuple[Dict[str, torch.Tensor], Optional[wcache.Attachment]]:
    """The model's tensors and the lease that keeps them valid (None when read from disk)."""
    def on_daemon_gone(gone: wcache.DaemonGone) -> None:
        # CUDA IPC memory lives in the daemon's process: once it is gone the
        # parameters are dangling, so a real engine must stop serving. (posix-shm
        # pages of the mock backend stay readable; we only log.)
        log.error("wcache daemon gone (%s: %s)", gone.code.name, gone.details)

    def on_notice(notice) -> None:
        if notice.kind == wcache.NOTICE_DRAINING:
            # The daemon is stopping and waits for its leases until the deadline.
            # A real engine finishes in-flight requests, drops the weights and
            # exits (or restarts) before notice.deadline_unix_ms.
            log.warning("wcache daemon draining: %s", notice.message)

    try:
        lease = wcache.attach(cfg, socket=socket, device_uuid=device_uuid, device_index=device_index,
                              client_name=f"example-engine (pid {os.getpid()})",
                              on_daemon_gone=on_daemon_gone, on_notice=on_notice)
    except wcache.NoDaemonError as exc:
        log.info("%s; loading from disk", exc)
        return load_from_disk(cfg.model), None
    # Any other WcacheError propagates: IncompatibleConfigError lists exactly
    # which fields differ (exc.diffs), the rest name the socket and the cause.
    return lease.tensors(), lease


# --- 3. into the model -------------------------------------------------------------------------

def skeleton(specs: Dict[str, Tuple[torch.dtype, Tuple[int, ...]]]) -> nn.Module:
    """A module tree with one (meta, unallocated) parameter per checkpoint tensor,
    standing in for the engine's real model class."""
    root = nn.Module()
    for name, (dt, shape) in specs.items():
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(leaf, nn.Parameter(torch.empty(shape, dtype=dt, device="meta"), requires_grad=False))
    return root


def fill(model: nn.Module, state: Dict[str, torch.Tensor], device: torch.device, zero_copy: bool) -> int:
    """Put state into model's parameters; returns the bytes copied (0 when zero-copy).

    zero_copy: the parameters *are* the daemon's tensors (they must already be
    on the model's device, e.g. CUDA IPC tensors on their GPU). They are shared
    and read-only: never modify them in place. Otherwise every tensor is copied
    once to device (e.g. the mock backend's CPU shm → a GPU).
    """
    copied = 0
    for name, t in state.items():
        *path, leaf = name.split(".")
        mod = model.get_submodule(".".join(path)) if path else model
        old = getattr(mod, leaf)
        if tuple(old.shape) != tuple(t.shape) or old.dtype != t.dtype:
            raise ValueError(f"{name}: checkpoint has {t.dtype}{list(t.shape)}, model wants {old.dtype}{list(old.shape)}")
        if zero_copy:
            if t.device != device:
                raise ValueError(f"{name} is on {t.device}, the model on {device}: zero-copy needs the same device")
            new = t
        else:
            new = torch.empty(t.shape, dtype=t.dtype, device=device)
            new.copy_(t)
            copied += t.numel() * t.element_size()
        setattr(mod, leaf, nn.Parameter(new, requires_grad=False))
    return copied


# --- the engine's start-up -----------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="checkpoint directory (safetensors, index.json honoured)")
    p.add_argument("--socket", help="explicit daemon socket (default: derived from the GPU's UUID)")
    p.add_argument("--device-uuid", help="canonical UUID of the GPU (default: from --device-index)")
    p.add_argument("--device-index", type=int, help="CUDA ordinal this process loads on (default: current)")
    p.add_argument("--device-capability", help="default: wcache.device_capability(index) on a GPU")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--tp-rank", type=int, default=0)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--engine-name", default="", help="as given to wcache serve --engine-name")
    p.add_argument("--engine-version", default="", help="as given to wcache serve --engine-version")
    p.add_argument("--target", default="auto", help="device for the parameters: auto (where the weights are), "
                                                     "cpu, cuda:N")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

    t0 = time.monotonic()
    try:
        capability = args.device_capability
        if capability is None:
            index = args.device_index
            if index is None:
                index = torch.cuda.current_device() if torch.cuda.is_available() else 0
            capability = wcache.device_capability(index)
        cfg = expected_config(args.model, tp_size=args.tp_size, tp_rank=args.tp_rank, dtype=args.dtype,
                              device_capability=capability, engine_name=args.engine_name,
                              engine_version=args.engine_version)
        state, lease = weights(cfg, socket=args.socket, device_uuid=args.device_uuid, device_index=args.device_index)
    except wcache.IncompatibleConfigError as exc:
        for d in exc.diffs:
            log.error("config mismatch: %s: daemon=%r engine=%r", d.field, d.daemon, d.client)
        return 2
    except wcache.WcacheError as exc:
        log.error("cannot use the wcache daemon: %s", exc)
        return 1
    t1 = time.monotonic()

    first = next(iter(state.values()))
    device = first.device if args.target == "auto" else torch.device(args.target)
    model = skeleton({n: (t.dtype, tuple(t.shape)) for n, t in state.items()})
    # Tensors already where the model lives are used as they are: the daemon's
    # memory itself (zero-copy), or the private copies read from disk.
    copied = fill(model, state, device, zero_copy=(device == first.device))
    t2 = time.monotonic()

    total = sum(t.numel() * t.element_size() for t in state.values())
    source = f"wcache daemon {lease.device_uuid} (lease {lease.lease_id})" if lease else "disk"
    print(f"{len(state)} tensors, {total} bytes from {source} in {t1 - t0:.3f}s; "
          f"model filled on {device} in {t2 - t1:.3f}s, {copied} bytes copied")
    # The lease is held for as long as the engine serves: `lease` stays
    # referenced by the engine (here: until main returns and the process exits,
    # which closes the connection and releases it).
    if lease is not None:
        lease.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
