"""SGLang: ``--load-format wcache``, a model loader that keeps each rank's weights in its GPU's wcache daemon.

Installing ``wcache[sglang]`` registers ``register`` in the entry-point
group ``sglang.srt.plugins``; SGLang's ``load_plugins`` calls it in every
process. It

* adds "wcache" to the ``--load-format`` choices
  (``sglang.srt.server_args.add_load_format_choices``), before ServerArgs is
  parsed;
* wraps ``LoadConfig._verify_load_format`` (HookRegistry, AROUND): the
  string "wcache" becomes the class WcacheModelLoader, which SGLang's
  ``get_model_loader`` instantiates as it does any loader class (every other
  format is verified as before).

    python -m sglang.launch_server --model-path /models/llama --load-format wcache

``WcacheModelLoader.load_model`` has the cases of wcache.vllm: attach (the
model is built on the meta device and pointed at the daemon's tensors,
zero-copy; SGLang's post-processing is not run again: its results are what
was published), publish into an empty daemon (SGLang's loader for the same
checkpoint loads and post-processes, the result is published and the model
continues on the daemon's copies), no daemon (SGLang's loader, unchanged, or
an error with ``fallback: "error"``), mismatch (IncompatibleConfigError).

``preloaded_weights_bytes`` (SGLang's KV-sizing contract: the scheduler
adds it back to the free memory it sampled before the load,
``ModelRunner.account_preloaded_weights``) is the daemon's bytes when they
were attached (resident before this process measured its baseline), 0
otherwise.

Every rank logs one line when its model is loaded (wcache.engine.summary:
attached, published or loaded, tensors, MiB, seconds, and the reason of a
fallback) to SGLang's log: ``register`` routes wcache's records to the
``sglang`` logger, which SGLang's processes print through the root logger
they configure (``configure_logger``, with the rank prefix of each
scheduler), once.

Versions: ``register`` checks ``sglang.__version__`` against MIN_VERSION,
BELOW_VERSION; outside, an error in SGLang's log names the version and the
range and the load format is not registered (SGLang then refuses
``--load-format wcache`` as an invalid choice). The extra ``wcache[sglang]``
requires no SGLang, so installing it never replaces the user's SGLang or
torch. Options (``--model-loader-extra-config``):
wcache.engine.EngineOptions (content_policy among them: the files of a local
``--model-path`` are proven before an attach and carried by a publish).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Dict, Optional, Tuple

import torch
from torch import nn

from . import _modules as modules
from ..checkpoint import checkpoint_digest
from .._config import CacheConfig
from ._engine import (EngineOptions, config_digest, daemon_reachable, load_or_publish_model, loaded_alone, mock_backend,
                      route_logs, summary, version_in, version_range)
from .._publish import Weights
from .._vocab import normalize_dtype, normalize_quantization

log = logging.getLogger("wcache.sglang")

LOAD_FORMAT = "wcache"
ENGINE_NAME = "sglang"
VERIFY_TARGET = "sglang.srt.configs.load_config.LoadConfig._verify_load_format"
_WHERE = "--model-loader-extra-config (load format wcache)"

# The SGLang releases this plugin supports (docs/engines.md, "Tests and
# pinned versions"): >= MIN_VERSION, < BELOW_VERSION. The extra
# wcache[sglang] requires no SGLang (a pin would replace the user's SGLang
# and its torch, or a build of SGLang under another distribution name): the
# range is checked here, when SGLang loads the plugin.
MIN_VERSION = (0, 5, 23)
BELOW_VERSION = (0, 6)


def supported(version: str) -> bool:
    """Whether SGLang version (its __version__, e.g. "0.5.23",
    "0.5.23.post1", "0.5.24rc0") is in [MIN_VERSION, BELOW_VERSION)."""
    return version_in(version, MIN_VERSION, BELOW_VERSION)


def _verify_load_format(original, self, *args, **kwargs):
    """AROUND hook of LoadConfig._verify_load_format: "wcache" → the loader class."""
    if isinstance(self.load_format, str) and self.load_format.lower() == LOAD_FORMAT:
        self.load_format = WcacheModelLoader
        return None
    return original(self, *args, **kwargs)


def register() -> None:
    """The sglang.srt.plugins entry point (see the module docstring): route
    wcache's log records to SGLang's log, and, for an SGLang in the
    supported range, register the load format. Idempotent (SGLang loads
    plugins in every process)."""
    import sglang  # noqa: PLC0415

    route_logs("sglang")
    version = getattr(sglang, "__version__", "")
    if not supported(version):
        log.error("wcache: SGLang %s is outside the range this wcache supports (sglang %s); the load format %r "
                  "is not registered", version or "(unknown version)", version_range(MIN_VERSION, BELOW_VERSION),
                  LOAD_FORMAT)
        return

    from sglang.srt.arg_groups.choices import LOAD_FORMAT_CHOICES  # noqa: PLC0415
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType  # noqa: PLC0415
    from sglang.srt.server_args import add_load_format_choices  # noqa: PLC0415

    if LOAD_FORMAT not in LOAD_FORMAT_CHOICES:
        add_load_format_choices([LOAD_FORMAT])
    if not any(hook is _verify_load_format for _, hook, _ in HookRegistry._hooks.get(VERIFY_TARGET, ())):  # noqa: SLF001
        HookRegistry.register(VERIFY_TARGET, _verify_load_format, HookType.AROUND)


def _base():
    from sglang.srt.model_loader.loader import BaseModelLoader  # noqa: PLC0415

    return BaseModelLoader


def _ranks() -> Dict[str, int]:
    from sglang.srt.distributed import parallel_state as ps  # noqa: PLC0415

    out = {"tp_size": ps.get_tensor_model_parallel_world_size(), "tp_rank": ps.get_tensor_model_parallel_rank()}
    try:
        pp = ps.get_pp_group()
        out.update(pp_size=pp.world_size, pp_rank=pp.rank_in_group)
    except (AssertionError, AttributeError):
        pass
    return out


def _layout() -> str:
    """This rank's place in SGLang's groups, "tp 0/1, pp 0/1", for the log line."""
    r = _ranks()
    return f"tp {r['tp_rank']}/{r['tp_size']}, pp {r.get('pp_rank', 0)}/{r.get('pp_size', 1)}"


def cache_config(model_config, capability: str) -> CacheConfig:
    """The CacheConfig of this rank (the fields of wcache.vllm.cache_config,
    with engine "sglang")."""
    import sglang  # noqa: PLC0415

    path = model_config.model_path
    revision = getattr(model_config, "revision", None) or ""
    hf = getattr(model_config, "hf_config", None)
    archs = getattr(hf, "architectures", None) or []
    return CacheConfig(
        model=path, revision=revision,
        checkpoint_digest=checkpoint_digest(path) if os.path.isdir(path) else "",
        model_arch=archs[0] if archs else "",
        dtype=normalize_dtype(model_config.dtype),
        quantization=normalize_quantization(getattr(model_config, "quantization", None) or ""),
        quantization_config_digest=config_digest(getattr(hf, "quantization_config", None)),
        engine_name=ENGINE_NAME, engine_version=sglang.__version__, device_capability=capability,
        **_ranks())


def _device(device_config) -> Tuple[torch.device, Optional[int]]:
    """The model's device and the index discovery uses (mock: 0 on CPU).
    SGLang's DeviceConfig.device is a torch.device of the type alone
    ("cuda", not "cuda:N"); gpu_id is the rank's GPU, -1 for the current one."""
    kind = torch.device(device_config.device).type
    gpu = getattr(device_config, "gpu_id", None)
    if kind in ("cuda", "hip"):
        index = gpu if gpu is not None and gpu >= 0 else torch.cuda.current_device()
        return torch.device(kind, index), index
    return torch.device(kind), (0 if mock_backend() else None)


class WcacheModelLoader(_base()):
    """The "wcache" load format; see the module docstring."""

    def __init__(self, load_config):
        super().__init__(load_config)
        self.options = EngineOptions.from_mapping(load_config.model_loader_extra_config, _WHERE)
        self.preloaded_weights_bytes = 0
        self._disk_config = dataclasses.replace(load_config, load_format="auto", model_loader_extra_config={})

    def _disk_loader(self, model_config=None):
        from sglang.srt.model_loader.loader import get_model_loader  # noqa: PLC0415

        return get_model_loader(self._disk_config, model_config)

    def download_model(self, model_config) -> None:
        self._disk_loader(model_config).download_model(model_config)

    def load_model(self, *, model_config, device_config) -> nn.Module:
        self.preloaded_weights_bytes = 0
        device, index = _device(device_config)
        start = time.monotonic()
        if not daemon_reachable(self.options) or (index is None and not (self.options.socket or
                                                                          self.options.device_uuid)):
            reason = f"no daemon to name for device {device}"
            self.options.no_daemon(ENGINE_NAME, reason)
            model = self._disk_loader(model_config).load_model(model_config=model_config, device_config=device_config)
            log.info("%s", summary(loaded_alone(model, reason), time.monotonic() - start,
                                   f"{model_config.model_path} ({_layout()})"))
            return model

        self.options.require_daemon(ENGINE_NAME, index)
        cfg = cache_config(model_config, self.options.capability(index or 0))
        model, weights = load_or_publish_model(
            self.options, ENGINE_NAME, index, cfg,
            lambda: self._disk_loader(model_config).load_model(model_config=model_config, device_config=device_config),
            lambda weights: self._attach(model_config, weights),
            **self.options.content_kwargs(model_config.model_path))
        log.info("%s", summary(weights, time.monotonic() - start, f"{model_config.model_path} ({_layout()})"))
        return model.eval()

    def _attach(self, model_config, weights: Weights) -> nn.Module:
        from sglang.srt.model_loader.loader import (  # noqa: PLC0415
            _get_quantization_config, _initialize_model, set_default_torch_dtype)

        quant_config = _get_quantization_config(model_config, self.load_config)
        with set_default_torch_dtype(model_config.dtype):
            with torch.device("meta"):
                model = _initialize_model(model_config, self.load_config, quant_config)
        # SGLang's post-processing ran in the publisher; what it produced
        # (repacked weights, new scales, derived tensors) is what was published.
        modules.install(model, weights, weights.metadata, check_shapes=False, allow_new=True)
        # The device memory the attached generation holds (its arenas), resident
        # before SGLang sampled its pre-load baseline.
        self.preloaded_weights_bytes = int(weights.attachment.device_bytes)
        return model


# The loader's public name stays wcache.sglang.WcacheModelLoader, the one SGLang logs
# and users configured before the engines moved to wcache.engines (wcache.sglang
# is this module under that import path).
WcacheModelLoader.__module__ = "wcache.sglang"

__all__ = ["BELOW_VERSION", "ENGINE_NAME", "LOAD_FORMAT", "MIN_VERSION", "WcacheModelLoader", "cache_config", "register",
           "supported"]
