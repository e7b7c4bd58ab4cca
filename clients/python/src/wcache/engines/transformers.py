"""Hugging Face transformers: ``from_pretrained`` with the weights kept by the wcache daemon.

    import wcache.transformers

    model = wcache.transformers.from_pretrained("/models/llama-3-8b", dtype=torch.bfloat16,
                                                device_map="cuda:0")

returns what ``AutoModelForCausalLM.from_pretrained`` returns — the same
class, config, generation config, evaluation mode — with its parameters and
buffers in the memory of the daemon of the model's GPU:

* the daemon holds this model (same checkpoint digest, dtype, transformers
  version, device capability): the model is built on the meta device (no
  weight allocated, no tensor byte read from the files) and every parameter
  and buffer is pointed at the attached tensors, zero-copy, ties included;
* the daemon is empty: the model is loaded from disk as usual, its tensors
  are published, and the model continues on the daemon's copies (its own
  are freed), so the next start attaches;
* there is no daemon (no socket; or, on a host without a GPU, no socket or
  device named and no mock backend): the plain ``from_pretrained`` result,
  unless ``fallback="error"``;
* the daemon holds other weights: IncompatibleConfigError naming the fields;
  weights published from files whose content differs from this
  checkpoint's: ContentMismatchError naming the first differing file.

The lease lives with the model: ``model.wcache_weights`` is the
wcache.Weights (``.source`` "attached", "published" or "loaded", ``.reason``,
``.release()``). Keep the model alive while it is used; drop it (or call
release) to end the lease.

The cache key (wcache.CacheConfig): model = the directory (or hub id),
checkpoint_digest of its safetensors headers, model_arch, revision (hub
snapshots), dtype as loaded (the one asked for; for "auto", the config's or
the checkpoint's), quantization "none",
engine_name "transformers", engine_version transformers.__version__,
device_capability of the device. Keyword arguments that would change which
bytes or which modules the model has (quantization_config, adapters,
device maps over several devices, tensor parallelism, kernels, …) are refused
with ValueError: use AutoModelForCausalLM.from_pretrained for those.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, Optional, Tuple

from . import _modules as modules
from ..checkpoint import checkpoint_digest
from .._config import CacheConfig
from ._engine import EngineOptions, daemon_reachable, gpu_visible, mock_backend
from .._errors import NoDaemonError, WcacheError
from .._paths import Getenv
from .._publish import Weights, load_or_publish
from .._vocab import normalize_dtype

log = logging.getLogger("wcache.transformers")

ENGINE_NAME = "transformers"

# from_pretrained keyword arguments that keep the weights' bytes and the
# model's modules as the cache key describes them.
_SUPPORTED = frozenset({"dtype", "torch_dtype", "device_map", "attn_implementation", "revision",
                        "trust_remote_code", "local_files_only", "cache_dir", "token", "low_cpu_mem_usage"})
# ... of which these also go to AutoConfig / the hub (download_kwargs).
_HUB_KWARGS = ("revision", "local_files_only", "cache_dir", "token")


def _import():
    try:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
    except ImportError as exc:
        raise WcacheError("wcache.transformers needs transformers and torch: pip install 'wcache[transformers]'") \
            from exc
    return torch, transformers


def from_pretrained(pretrained_model_name_or_path, *, auto_class=None, socket: Optional[str] = None,
                    device_uuid: Optional[str] = None, device_capability: Optional[str] = None,
                    fallback: str = "load", verify: bool = False, client_name: Optional[str] = None,
                    content_policy: Optional[str] = None, getenv: Getenv = None, **kwargs):
    """AutoModelForCausalLM.from_pretrained(pretrained_model_name_or_path,
    **kwargs), its weights attached from (or published into) the wcache
    daemon of the model's device. See the module docstring.

    auto_class: another transformers auto class (default
    AutoModelForCausalLM). socket, device_uuid, device_capability, fallback,
    verify, client_name, content_policy: wcache.engine.EngineOptions (the
    checkpoint's safetensors files are proven under content_policy,
    default "identity", before an attach, and a publish carries their
    content). The daemon is the one
    of the device in device_map (a single device: "cuda:N", N, or {"": N});
    without device_map, of torch's current GPU, or of mock device 0 when
    $WCACHE_BACKEND is "mock".

    Raises ValueError for unsupported kwargs, IncompatibleConfigError (the
    daemon holds other weights), modules.ModuleMismatchError (attached
    tensors that do not fit the model), NoDaemonFallbackError
    (fallback="error" without a daemon), and the errors of wcache.attach,
    wcache.publish and from_pretrained.
    """
    torch, transformers = _import()
    unsupported = sorted(set(kwargs) - _SUPPORTED)
    if unsupported:
        raise ValueError(f"wcache.transformers.from_pretrained does not support {unsupported} (they change the "
                         "weights or the model's modules); use AutoModelForCausalLM.from_pretrained")
    options = EngineOptions.from_mapping(
        {k: v for k, v in {"socket": socket, "device_uuid": device_uuid, "device_capability": device_capability,
                           "fallback": fallback, "verify": verify, "client_name": client_name,
                           "content_policy": content_policy}.items()
         if v is not None}, "wcache.transformers.from_pretrained")
    auto_class = auto_class or transformers.AutoModelForCausalLM
    device, device_index = _device(torch, kwargs.get("device_map"), getenv)
    path, model_id, revision = _local_dir(pretrained_model_name_or_path, kwargs)
    hub = {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
    hf_config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=kwargs.get("trust_remote_code"),
                                                        **{k: v for k, v in hub.items() if k != "revision"})
    disk_kwargs = dict(kwargs)
    if path != pretrained_model_name_or_path:
        disk_kwargs.pop("revision", None)  # the snapshot directory is that revision

    def disk_load():
        return auto_class.from_pretrained(path, **disk_kwargs)

    if not daemon_reachable(options, getenv):
        reason = "no GPU visible and no socket, device_uuid or mock backend to name a daemon"
        options.no_daemon(ENGINE_NAME, reason)
        log.info("wcache: %s; loading from disk", reason)
        model = disk_load()
        model.wcache_weights = Weights({}, "loaded", reason=reason)
        return model

    cfg = cache_config(path, model_id, revision, hf_config, kwargs, transformers.__version__,
                       options.capability(device_index if device_index is not None else 0, getenv))
    loaded: Dict[str, object] = {}

    def load() -> Tuple[Dict[str, object], Dict[str, str]]:
        model = disk_load()
        loaded["model"] = model
        table = modules.module_table(model)
        return table.tensors, table.metadata

    discovery = options.discovery(device_index)
    if discovery["device_index"] is None and discovery["socket"] is None and discovery["device_uuid"] is None \
            and not gpu_visible() and mock_backend(getenv):
        discovery["device_index"] = 0
    options.require_daemon(ENGINE_NAME, discovery["device_index"], getenv)
    weights = load_or_publish(cfg, load, sha256=options.verify, client_name=options.client(ENGINE_NAME),
                              getenv=getenv, **discovery, **options.content_kwargs(path))
    if weights.source == "loaded":
        options.no_daemon(ENGINE_NAME, weights.reason or "no daemon")
        model = loaded["model"]
    elif weights.source == "published":
        model = loaded.pop("model")
        modules.install(model, weights, weights.metadata)  # the daemon's copies replace the model's own
    else:
        model = _skeleton(torch, transformers, auto_class, hf_config, kwargs)
        modules.install(model, weights, weights.metadata)
        _finish(model, path, hub, kwargs)
    if device is not None and weights.source != "loaded":
        _check_device(model, device)
    model.wcache_weights = weights
    log.info("wcache: %s: %d tensors %s", path, len(weights), weights.source)
    return model


def cache_config(path: str, model_id: str, revision: str, hf_config, kwargs: dict, version: str,
                 capability: str) -> CacheConfig:
    """The CacheConfig of a transformers model: see the module docstring."""
    archs = getattr(hf_config, "architectures", None) or []
    return CacheConfig(model=model_id, checkpoint_digest=checkpoint_digest(path),
                       model_arch=archs[0] if archs else type(hf_config).__name__, revision=revision,
                       dtype=resolved_dtype(path, hf_config, kwargs.get("dtype", kwargs.get("torch_dtype"))),
                       engine_name=ENGINE_NAME, engine_version=version, device_capability=capability)


def resolved_dtype(path: str, hf_config, dtype) -> str:
    """The dtype from_pretrained loads in, canonical: the one asked for, or
    for "auto" (and None, transformers 5's default) the config's dtype, else
    the first floating-point dtype of the checkpoint. Never "auto" in the key:
    the daemon lets "auto" match any dtype, and these bytes are one dtype's."""
    if dtype is not None and normalize_dtype(dtype) != "auto":
        return normalize_dtype(dtype)
    configured = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if configured is not None and normalize_dtype(configured) != "auto":
        return normalize_dtype(configured)
    from ..checkpoint import checkpoint_files, read_header  # noqa: PLC0415

    files, _ = checkpoint_files(path)
    for f in files:
        _, tensors = read_header(f)
        for name in sorted(tensors):
            dt = tensors[name][0]
            if dt.startswith(("F", "BF")):
                return normalize_dtype(dt)
    return "auto"


def _device(torch, device_map, getenv: Getenv):
    """(torch.device or None, CUDA index or None) of a single-device device_map."""
    if device_map is None:
        return None, None
    target = device_map
    if isinstance(device_map, dict):
        if set(device_map) != {""}:
            raise ValueError(f"wcache.transformers: device_map {device_map!r} spans modules; give one device")
        target = device_map[""]
    if isinstance(target, str) and target in ("auto", "balanced", "balanced_low_0", "sequential"):
        raise ValueError(f"wcache.transformers: device_map {target!r} may span devices; give one device")
    device = torch.device(f"cuda:{target}" if isinstance(target, int) else target)
    index = device.index if device.type == "cuda" else None
    if device.type == "cuda" and index is None:
        index = torch.cuda.current_device()
    return device, index


def _local_dir(name_or_path, kwargs: dict) -> Tuple[str, str, str]:
    """(local directory, model id for the cache key, revision): a directory
    as given (absolute), or a hub id's snapshot in the hub cache (downloaded
    when absent, as from_pretrained would)."""
    if os.path.isdir(name_or_path):
        return os.path.abspath(name_or_path), os.path.abspath(name_or_path), ""
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - a dependency of transformers

    path = snapshot_download(str(name_or_path), revision=kwargs.get("revision"), cache_dir=kwargs.get("cache_dir"),
                             token=kwargs.get("token"), local_files_only=bool(kwargs.get("local_files_only")),
                             allow_patterns=["*.json", "*.safetensors", "*.py", "*.model", "*.txt", "*.tiktoken"])
    return path, str(name_or_path), os.path.basename(os.path.normpath(path))


def _skeleton(torch, transformers, auto_class, hf_config, kwargs: dict):
    """The model from_pretrained would build, on the meta device (no weight allocated)."""
    import copy  # noqa: PLC0415

    config = copy.deepcopy(hf_config)
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
    extra = {}
    if "attn_implementation" in kwargs:
        extra["attn_implementation"] = kwargs["attn_implementation"]
    if kwargs.get("trust_remote_code") is not None:
        extra["trust_remote_code"] = kwargs["trust_remote_code"]
    if dtype is None or dtype == "auto":
        dtype = getattr(config, "dtype", None) or torch.get_default_dtype()
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    with torch.device("meta"):
        model = auto_class.from_config(config, dtype=dtype, **extra)
    return model


def _finish(model, path: str, hub: dict, kwargs: dict) -> None:
    """What from_pretrained does after loading: name, eval mode, generation config."""
    model.config.name_or_path = path
    model.eval()
    if model.can_generate() and hasattr(model, "adjust_generation_fn"):
        model.adjust_generation_fn(None, True, None, path, cache_dir=hub.get("cache_dir"), force_download=False,
                                   proxies=None, local_files_only=bool(hub.get("local_files_only")),
                                   token=hub.get("token"), revision=None, subfolder="",
                                   trust_remote_code=kwargs.get("trust_remote_code"))


def _check_device(model, device) -> None:
    """The attached tensors are on the daemon's device: it must be the one asked for."""
    for name, p in model.named_parameters():
        if p.device != device and not (device.type == "cpu" and p.device.type == "cpu"):
            raise WcacheError(f"wcache.transformers: {name} is on {p.device} (the daemon's device), "
                              f"device_map asked for {device}")
        return


__all__ = ["ENGINE_NAME", "cache_config", "from_pretrained", "resolved_dtype", "NoDaemonError"]
