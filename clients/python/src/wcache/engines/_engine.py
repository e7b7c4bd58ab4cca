"""What every engine integration shares: its options and how it finds its daemon.

The integrations (wcache.transformers, wcache.vllm, wcache.sglang) take the
same options, as keyword arguments (transformers) or as the JSON of
``--model-loader-extra-config`` (vLLM, SGLang):

* ``socket``: the daemon's socket path (default: derived from the GPU's UUID
  through the socket template, $WCACHE_SOCKET_TEMPLATE / the runtime dir);
* ``device_uuid``: the GPU's canonical UUID (default: read from the device
  the engine loads on);
* ``device_capability``: default ``wcache.device_capability(index)``
  ("9.0", "gfx942", "mock" on the mock backend);
* ``fallback``: what to do when no daemon can be used — ``"load"`` (default:
  the engine loads from disk as without wcache; only for *no daemon* and
  *another process is publishing*; a config mismatch is always an error) or
  ``"error"`` (refuse to start without the daemon's weights);
* ``verify``: send a SHA-256 of every tensor when publishing (needed by a
  daemon run with --verify-publish); default False;
* ``client_name``: shown by ``wcache status`` (default "<engine> (pid N)");
* ``content_policy``: how the checkpoint files the engine loads from are
  proven to hold the daemon's bytes (wcache.content): ``"identity"``
  (default: the files the daemon or publisher loaded, by one stat each, or
  a digest cached by an earlier run; any other file is a miss and the
  engine loads from disk), ``"hash"`` (also hashes unknown files once) or
  ``"headers"`` (headers only: unsafe for fine-tunes; the daemon must
  allow it). Files with other content are ContentMismatchError. A publish
  carries the files' content either way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional, Tuple

from .. import content
from . import _modules as modules
from ..checkpoint import model_files
from .._config import CacheConfig
from .._device import BACKEND_ENV, BACKEND_MOCK, device_capability
from .._discovery import check_socket, resolve
from .._errors import NoDaemonError, WcacheError
from .._paths import Getenv, _getter
from .._publish import Weights, load_or_publish

log = logging.getLogger("wcache.engine")

FALLBACK_LOAD = "load"
FALLBACK_ERROR = "error"


class NoDaemonFallbackError(WcacheError):
    """fallback="error" and no daemon could be used (``reason`` says why)."""

    def __init__(self, engine: str, reason: str):
        self.reason = reason
        super().__init__(f"{engine}: no wcache daemon to take the weights from ({reason}) and fallback is "
                         f"{FALLBACK_ERROR!r}")


@dataclass(frozen=True)
class EngineOptions:
    """The options above, validated (see the module docstring)."""

    socket: Optional[str] = None
    device_uuid: Optional[str] = None
    device_capability: Optional[str] = None
    fallback: str = FALLBACK_LOAD
    verify: bool = False
    client_name: Optional[str] = None
    content_policy: str = content.POLICY_IDENTITY

    _KEYS = ("socket", "device_uuid", "device_capability", "fallback", "verify", "client_name", "content_policy")

    @classmethod
    def from_mapping(cls, options: Optional[Mapping[str, object]], where: str) -> "EngineOptions":
        """Options from a dict (e.g. --model-loader-extra-config): unknown
        keys and wrong types raise ValueError naming them and where."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(cls._KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown wcache option(s) {unknown}; known: {list(cls._KEYS)}")
        for key in ("socket", "device_uuid", "device_capability", "client_name"):
            v = options.get(key)
            if v is not None and (not isinstance(v, str) or not v):
                raise ValueError(f"{where}: wcache option {key} must be a non-empty string, not {v!r}")
        fallback = options.get("fallback", FALLBACK_LOAD)
        if fallback not in (FALLBACK_LOAD, FALLBACK_ERROR):
            raise ValueError(f"{where}: wcache option fallback must be {FALLBACK_LOAD!r} or {FALLBACK_ERROR!r}, "
                             f"not {fallback!r}")
        verify = options.get("verify", False)
        if not isinstance(verify, bool):
            raise ValueError(f"{where}: wcache option verify must be true or false, not {verify!r}")
        policy = options.get("content_policy", content.POLICY_IDENTITY)
        try:
            policy = content.parse_policy(policy if isinstance(policy, str) else repr(policy))
        except ValueError as exc:
            raise ValueError(f"{where}: wcache option {exc}") from None
        return cls(socket=options.get("socket"), device_uuid=options.get("device_uuid"),
                   device_capability=options.get("device_capability"), fallback=fallback, verify=verify,
                   client_name=options.get("client_name"), content_policy=policy)

    def capability(self, device_index: int, getenv: Getenv = None) -> str:
        """device_capability, or what the daemon's backend reports for
        device_index (raises WcacheError without a GPU or the mock)."""
        if self.device_capability is not None:
            return self.device_capability
        return device_capability(device_index, getenv=getenv)

    def content_kwargs(self, directory: Optional[str]) -> dict:
        """The keyword arguments of wcache.load_or_publish that prove (and
        publish) the content of the checkpoint files in directory: none
        when the engine has no local directory (a hub id not in the local
        cache), whose attach the daemon then answers only where the
        generation allows "headers" (else a miss: load from disk)."""
        files = source_files(directory)
        if files is None:
            return {}
        return {"files": files, "content_policy": self.content_policy}

    def client(self, engine: str) -> str:
        return self.client_name or f"{engine} (pid {os.getpid()})"

    def discovery(self, device_index: Optional[int]) -> dict:
        """The keyword arguments of wcache.attach/publish that find the daemon."""
        return {"socket": self.socket, "device_uuid": self.device_uuid, "device_index": device_index}

    def no_daemon(self, engine: str, reason: str) -> None:
        """Raise NoDaemonFallbackError unless fallback is "load"."""
        if self.fallback != FALLBACK_LOAD:
            raise NoDaemonFallbackError(engine, reason)

    def require_daemon(self, engine: str, device_index: Optional[int], getenv: Getenv = None) -> None:
        """With fallback "error", raise NoDaemonFallbackError now when the
        daemon's socket is absent (before the engine loads anything)."""
        if self.fallback == FALLBACK_LOAD:
            return
        target = resolve(getenv=getenv, **self.discovery(device_index))
        try:
            check_socket(target)
        except NoDaemonError as exc:
            raise NoDaemonFallbackError(engine, str(exc)) from None


def source_files(directory: Optional[str]) -> Optional[List[str]]:
    """The safetensors files of a local checkpoint directory that an engine
    loads (the files checkpoint_digest covers: wcache.checkpoint.model_files,
    the one place files are derived), None without a directory or files."""
    if not directory or not os.path.isdir(directory):
        return None
    return model_files(directory)


def config_digest(value) -> str:
    """"sha256:" of the canonical JSON of a quantization config (a dict or an
    object with to_dict); "" for none."""
    if not value:
        return ""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    raw = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def mock_backend(getenv: Getenv = None) -> bool:
    """$WCACHE_BACKEND is "mock": devices are the mock backend's (no GPU needed)."""
    return _getter(getenv)(BACKEND_ENV).strip() == BACKEND_MOCK


def gpu_visible() -> bool:
    """torch sees a GPU (CUDA or ROCm)."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def daemon_reachable(options: EngineOptions, getenv: Getenv = None) -> bool:
    """Whether a daemon could be found at all: an explicit socket or device
    UUID, a visible GPU, or the mock backend. Without any, discovery has no
    device to name, which is "no daemon" for an engine on a CPU-only host."""
    return bool(options.socket or options.device_uuid or gpu_visible() or mock_backend(getenv))


def load_or_publish_model(options: EngineOptions, engine: str, device_index: Optional[int], cfg: CacheConfig,
                          load_from_disk: Callable[[], Any], attach: Callable[[Weights], Any],
                          check: Optional[Callable[[Any], List[Tuple[str, str]]]] = None,
                          **publish_args) -> Tuple[Any, Weights]:
    """The three cases of an engine loader (vLLM, SGLang) around
    wcache.load_or_publish: (model, weights).

    No daemon: load_from_disk() builds the model as the engine does
    (options.no_daemon applies the fallback policy). An empty daemon: the
    same model, its every parameter and buffer (wcache.modules.module_table)
    published and then installed over the daemon's copy. The daemon holds
    cfg: attach(weights) builds the model from the attached weights,
    load_from_disk is never called. The lease lives as long as the model
    (model._wcache_weights). publish_args go to load_or_publish as they
    are; its errors (a config mismatch among them) propagate.

    A publication must be runnable: the loaded model is checked first
    (check(model), default wcache.modules.unrunnable: every parameter holds
    its weight) and one with problems is never published: the engine keeps
    its own model ("loaded", ``reason`` naming the layers; the daemon stays
    as it was). An attach(weights) that raises wcache.modules.NotRunnableError
    (its post-attach check failed: a parameter still empty or on the meta
    device, a method without the state it needs) ends the lease and loads
    from disk ("loaded", ``reason`` says why): the engine never runs on
    weights it cannot use. Both apply the fallback policy (options.no_daemon)
    as "no daemon" does.
    """
    loaded = {}
    check = check if check is not None else modules.unrunnable

    def load():
        model = load_from_disk()
        loaded["model"] = model
        problems = check(model)
        if problems:
            raise modules.NotRunnableError(problems, f"{engine}: not published, the loaded model's tensors are "
                                                     f"not what it runs")
        table = modules.module_table(model)
        return table.tensors, table.metadata

    def own(model, reason: str) -> Tuple[Any, Weights]:
        options.no_daemon(engine, reason)
        return model, loaded_alone(model, reason)

    try:
        weights = load_or_publish(cfg, load, sha256=options.verify, client_name=options.client(engine),
                                  **options.discovery(device_index), **publish_args)
    except modules.NotRunnableError as exc:
        if "model" not in loaded:
            raise
        log.warning("wcache: %s; the engine keeps its own copy", exc)
        return own(loaded.pop("model"), str(exc))
    if weights.source == "loaded":
        options.no_daemon(engine, weights.reason or "no daemon")
        model = loaded["model"]
    elif weights.source == "published":
        model = loaded.pop("model")
        modules.install(model, weights, weights.metadata)
    else:
        try:
            model = attach(weights)
        except modules.NotRunnableError as exc:
            reason = f"the daemon's weights are not runnable here ({exc})"
            log.warning("wcache: %s; loading from disk", reason)
            weights.clear()
            weights.release()
            return own(load_from_disk(), reason)
    model._wcache_weights = weights  # the lease lives as long as the model
    return model, weights


def loaded_alone(model: Any, reason: str) -> Weights:
    """The Weights of a model the engine loaded on its own (source "loaded",
    reason why), kept as model._wcache_weights: what summary() reports for
    a start without the daemon's weights."""
    table = modules.module_table(model)
    weights = Weights(table.tensors, "loaded", table.metadata, reason=reason)
    model._wcache_weights = weights
    return weights


def version_in(version: str, minimum: Tuple[int, ...], below: Tuple[int, ...]) -> bool:
    """Whether an engine's version string (its __version__: "0.32.0",
    "0.34.1+cpu", "0.5.23.post1", "0.35.0.dev3") lies in [minimum, below),
    compared on as many leading numbers as minimum has. A version without
    that many leading numbers ("", "dev") is outside every range."""
    parts = []
    for piece in version.split("+")[0].split(".")[:len(minimum)]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            return False
        parts.append(int(digits))
    return len(parts) == len(minimum) and minimum <= tuple(parts) < below


def version_range(minimum: Tuple[int, ...], below: Tuple[int, ...]) -> str:
    """">=0.5.23,<0.6": the range version_in checks, as a requirement reads."""
    return f">={'.'.join(map(str, minimum))},<{'.'.join(map(str, below))}"


class _ToEngineLog(logging.Handler):
    """Hands each record of the "wcache" loggers to the engine's logger, as
    if logged there: its handlers at the time of the record (an engine
    may configure its logging after the plugin is loaded, and again), its
    level, its propagation."""

    def __init__(self, engine_logger: str):
        super().__init__()
        self.engine_logger = engine_logger

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(self.engine_logger)
        if target.isEnabledFor(record.levelno):
            target.handle(record)


def route_logs(engine_logger: str) -> None:
    """Send the records of the "wcache" loggers (INFO and above) to the
    engine's own logger ("vllm": vLLM configures it with its handler and
    format, and does not propagate it to the root logger): what wcache did
    (attached, published, loaded, and why) shows in the engine's log, in its
    format and at its level, in every process that loads the plugin (vLLM's
    and SGLang's plugin loaders call it). Idempotent; the first engine to
    call it is the one. Where the engine logger has no handler of its own
    (VLLM_CONFIGURE_LOGGING=0, or SGLang, which configures the root logger)
    the records reach the root logger through it, as before."""
    ours = logging.getLogger("wcache")
    if any(isinstance(h, _ToEngineLog) for h in ours.handlers):
        return
    ours.addHandler(_ToEngineLog(engine_logger))
    ours.propagate = False
    if ours.level == logging.NOTSET:
        ours.setLevel(logging.INFO)


def summary(weights: Weights, seconds: float, what: str) -> str:
    """The line an engine logs once per rank after loading: where the
    weights came from, their bytes and tensors, the time it took, and for
    "loaded" the reason (no daemon, content not proven, a refused publish…)."""
    nbytes = 0
    for t in weights.values():
        try:
            nbytes += t.numel() * t.element_size()
        except AttributeError:
            pass
    verb = {"attached": "attached from the daemon", "published": "loaded from disk and published to the daemon",
            "loaded": "loaded from disk without the daemon"}.get(weights.source, weights.source)
    line = f"wcache: {what}: {verb}: {len(weights)} tensors, {nbytes / 2**20:.1f} MiB in {seconds:.2f} s"
    if weights.source == "loaded":
        line += f" (reason: {weights.reason or 'no daemon'})"
    return line

__all__ = ["EngineOptions", "config_digest", "source_files", "FALLBACK_ERROR", "FALLBACK_LOAD", "NoDaemonError", "NoDaemonFallbackError",
           "daemon_reachable", "gpu_visible", "load_or_publish_model", "loaded_alone", "mock_backend", "route_logs",
           "summary", "version_in", "version_range"]
