#!/usr/bin/env python3
"""A worked example: an inference engine's model loader that takes its weights from wcache.

On every (re)start the loader:

1. computes the CacheConfig it expects: the checkpoint digest of its model
   directory, its parallel layout, dtype, engine name and version, device
   capability;
2. calls wcache.load_or_publish(cfg, load) with its own loader: the daemon of
   the GPU it actually runs on (discovery by the GPU's UUID, never by rank)
   either holds the weights already (attach: milliseconds), or is empty
   (load() runs — read the checkpoint and post-process it, here a cast to the
   engine's dtype — and its result is published into the daemon, so that the
   next start attaches), or there is no daemon (load()'s tensors are used);
3. puts the tensors into the model: zero-copy (the parameters alias the
   daemon's memory) or copied to where the model lives;
4. holds the lease for the life of the process.
   Every error other than "no daemon" / "empty daemon" (unsafe socket, dead
   daemon, incompatible config) stops the engine: loading from disk would
   hide a deployment mistake.

Run it against a mock daemon (see docs/publish.md and docs/python-client.md):

    wcache serve --backend mock --gpu-id 0 &          # an empty daemon
    UUID=$(wcache devices --backend mock --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])')
    ARGS="--model /tmp/ckpt --device-uuid $UUID --device-capability mock --engine-name example --engine-version 1"
    clients/python/examples/engine_loader.py $ARGS     # the daemon is empty: loads, post-processes, publishes
    clients/python/examples/engine_loader.py $ARGS     # attaches to what the first run published

The same loader attaches to a daemon that loaded the files itself (`wcache
serve --model /tmp/ckpt`, same --dtype and engine flags). On a GPU node, leave
out --device-uuid: the loader derives it from torch.cuda.current_device() (or
--device-index).
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
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import wcache
from wcache.checkpoint import checkpoint_files, read_header
from wcache.dtypes import torch_dtype

log = logging.getLogger("engine_loader")

# CacheConfig dtype (canonical) → the safetensors spelling torch_dtype knows.
_SAFETENSORS_DTYPES = {"bf16": "BF16", "fp16": "F16", "fp32": "F32", "fp64": "F64"}


# --- 1. what the engine expects ----------------------------------------------------------------

def expected_config(model_dir: str, *, tp_size: int = 1, tp_rank: int = 0, pp_size: int = 1, pp_rank: int = 0,
                    dtype: str = "auto", device_capability: str = "", engine_name: str = "",
                    engine_version: str = "") -> wcache.CacheConfig:
    """The CacheConfig this engine process needs.

    checkpoint_digest reads only the safetensors headers (cheap even for a
    1 TB checkpoint) and makes the same weights match wherever they live.
    dtype is the engine's (its post-processing casts to it); engine_name and
    engine_version name whose post-processing the bytes are. device_capability
    must be what the daemon's backend reports: wcache.device_capability(index)
    on a GPU ("9.0", "gfx942"). The daemon compares every field.
    """
    return wcache.CacheConfig(
        model=os.path.abspath(model_dir),
        checkpoint_digest=wcache.checkpoint_digest(model_dir),
        tp_size=tp_size, tp_rank=tp_rank, pp_size=pp_size, pp_rank=pp_rank,
        dtype=dtype, engine_name=engine_name, engine_version=engine_version,
        device_capability=device_capability,
    )


# --- 2. the engine's own loader, and the one wcache call around it -------------------------------

def load_from_disk(model_dir: str) -> Dict[str, torch.Tensor]:
    """Read every tensor of the checkpoint (copies into this process)."""
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


def post_process(state: Dict[str, torch.Tensor], dtype: str) -> Dict[str, torch.Tensor]:
    """The engine's post-processing, here a cast of floating-point tensors to
    its dtype ("auto": as in the files). A real engine fuses, shards,
    transposes or repacks here; whatever it returns is what gets published."""
    canonical = wcache.normalize_dtype(dtype)
    if canonical == "auto":
        return state
    target = torch_dtype(_SAFETENSORS_DTYPES.get(canonical, ""), torch)
    if target is None:
        raise ValueError(f"this example cannot cast to {dtype!r}")
    return {n: t.to(target) if t.is_floating_point() else t for n, t in state.items()}


def weights(cfg: wcache.CacheConfig, *, socket: Optional[str] = None, device_uuid: Optional[str] = None,
            device_index: Optional[int] = None) -> wcache.Weights:
    """The model's tensors: the daemon's (attached, or published just now by
    this process) or, without a daemon, this process's own. Weights.attachment
    is the lease that keeps the daemon's memory valid (None for "loaded")."""
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

    def load() -> Dict[str, torch.Tensor]:
        # The engine's unchanged loading path: called only when the daemon has
        # nothing for cfg (empty, or no daemon at all).
        return post_process(load_from_disk(cfg.model), cfg.dtype)

    # IncompatibleConfigError (the daemon holds other weights) and every other
    # WcacheError propagate: exc.diffs lists exactly which fields differ.
    return wcache.load_or_publish(cfg, load, device_index=device_index, socket=socket, device_uuid=device_uuid,
                                  client_name=f"example-engine (pid {os.getpid()})",
                                  on_daemon_gone=on_daemon_gone, on_notice=on_notice)


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
    p.add_argument("--engine-name", default="", help="whose post-processing the weights are (set it when "
                   "publishing; a daemon serving files needs the same `wcache serve --engine-name`)")
    p.add_argument("--engine-version", default="")
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
        state = weights(cfg, socket=args.socket, device_uuid=args.device_uuid, device_index=args.device_index)
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
    lease = state.attachment
    if lease is None:
        source = f"from disk ({state.reason})"
    else:
        how = "published to" if state.source == "published" else "attached from"
        source = f"{how} wcache daemon {lease.device_uuid} (lease {lease.lease_id})"
    print(f"{len(state)} tensors, {total} bytes {source} in {t1 - t0:.3f}s; "
          f"model filled on {device} in {t2 - t1:.3f}s, {copied} bytes copied")
    # The lease is held for as long as the engine serves: `state` stays
    # referenced by the engine (here: until main returns and the process exits,
    # which closes the connection and releases it).
    state.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
