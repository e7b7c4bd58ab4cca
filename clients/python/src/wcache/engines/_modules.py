"""A torch module's tensors as a publish table, and the module rebuilt from attached tensors.

The engine integrations (wcache.transformers, wcache.vllm, wcache.sglang)
publish what a loaded model *is*: every parameter and buffer (non-persistent
buffers such as rotary tables included), each under the first name torch
gives it. Tied or shared tensors — the same object reachable under several
names, e.g. an LM head tied to the embedding — are published once; the other
names travel in the publish metadata, with which names are buffers:

* ``wcache.module.aliases``: JSON {alias: canonical name};
* ``wcache.module.buffers``: JSON {buffer name: persistent (bool)};
* ``wcache.module.attributes``: JSON [names]: plain tensor attributes of a
  module on the weights' device (engines' post-processing keeps derived
  tensors there, e.g. SGLang's MLA ``w_kc``); views of a parameter come
  back as views of it (a storage is published once).

``install`` puts attached tensors into a model built without weights (on
the meta device): each parameter is replaced by a parameter of the same class
(its attributes kept, e.g. vLLM's weight loaders) over the attached tensor,
zero-copy; each alias gets the very object of its canonical name, so ties are
ties again; and any plain attribute of a module that held a replaced meta
tensor (e.g. a copy of the rotary table kept next to its buffer) is pointed
at the replacement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

META_ALIASES = "wcache.module.aliases"
META_BUFFERS = "wcache.module.buffers"
META_ATTRIBUTES = "wcache.module.attributes"


class ModuleMismatchError(ValueError):
    """The attached tensors do not fit the model built to receive them:
    ``problems`` lists each (name, reason)."""

    def __init__(self, problems: List[Tuple[str, str]]):
        self.problems = list(problems)
        shown = "; ".join(f"{n}: {r}" for n, r in self.problems[:20])
        more = f" (and {len(self.problems) - 20} more)" if len(self.problems) > 20 else ""
        super().__init__(f"attached weights do not fit the model: {shown}{more}")


class NotRunnableError(ModuleMismatchError):
    """A model's tensors are not what it runs: a parameter with no elements
    (an engine moved the weight into private state, e.g. vLLM's CPU linear
    packing), one still on the meta device, one of another shape than its
    layer declares, or a layer whose method lacks the state it needs.
    ``problems`` lists each (name, reason); ``what`` says which step refused.

    The engine integrations never publish such a model (the engine keeps
    its own copy) and never run on such an attachment (the engine loads on
    its own): docs/engines.md, "A publication must be runnable"."""

    def __init__(self, problems: List[Tuple[str, str]], what: str = "the model's tensors are not what it runs"):
        super().__init__(problems)
        shown = "; ".join(f"{n}: {r}" for n, r in self.problems[:8])
        more = f" (and {len(self.problems) - 8} more)" if len(self.problems) > 8 else ""
        self.what = what
        self.args = (f"{what}: {shown}{more}",)


# declared(module_name, module, leaf) -> the shape the layer declares for its
# parameter leaf, or None when the engine does not say (see unrunnable).
Declared = Callable[[str, object, str], Optional[Tuple[int, ...]]]


def unrunnable(model, declared: Optional[Declared] = None) -> List[Tuple[str, str]]:
    """(name, reason) of every parameter of model that cannot be a weight
    the model runs on: still on the meta device; of another shape than
    declared() names for it (the engine knows its layers' shapes: vLLM's
    unquantized linear layers); or, where declared() says nothing (None, or
    no declared given), with no elements at all. Empty list: runnable as far
    as its tensors tell. Buffers are not checked (engines keep empty ones)."""
    out: List[Tuple[str, str]] = []
    for mod_name, mod in model.named_modules():
        prefix = mod_name + "." if mod_name else ""
        for leaf, p in mod._parameters.items():  # noqa: SLF001
            if p is None:
                continue
            name = prefix + leaf
            if p.is_meta:
                out.append((name, "still on the meta device"))
                continue
            want = declared(mod_name, mod, leaf) if declared is not None else None
            if want is not None:
                if tuple(p.shape) != tuple(want):
                    out.append((name, f"holds {list(p.shape)} ({p.numel()} elements), the layer declares "
                                      f"{list(want)}"))
            elif p.numel() == 0:
                out.append((name, f"has no elements ({list(p.shape)}): the weight is not in the tensor"))
    return out


@dataclass
class ModuleTable:
    """What module_table returns: canonical name → tensor, and the metadata
    that names aliases and buffers."""

    tensors: Dict[str, object]
    metadata: Dict[str, str] = field(default_factory=dict)


def module_table(model) -> ModuleTable:
    """Every parameter, buffer and tensor attribute (on the device of the
    first parameter) of model (a torch.nn.Module): a tensor reachable under
    several names is listed once, under the first name (module order), the
    others as aliases. Parameters are given as their plain tensor
    (``.data``); None buffers are skipped."""
    import torch  # noqa: PLC0415

    tensors: Dict[str, object] = {}
    first: Dict[int, str] = {}
    aliases: Dict[str, str] = {}
    buffers: Dict[str, bool] = {}
    attributes: List[str] = []
    device = next((p.device for p in model.parameters()), None)
    named = list(model.named_modules(remove_duplicate=False))
    for mod_name, mod in named:
        prefix = mod_name + "." if mod_name else ""
        non_persistent = getattr(mod, "_non_persistent_buffers_set", set())
        for leaf, p in mod._parameters.items():  # noqa: SLF001 - the registry torch keeps
            if p is None:
                continue
            _add(prefix + leaf, p, p.data, first, tensors, aliases)
        for leaf, b in mod._buffers.items():  # noqa: SLF001
            if b is None:
                continue
            name = prefix + leaf
            if _add(name, b, b, first, tensors, aliases):
                buffers[name] = leaf not in non_persistent
    for mod_name, mod in named:  # after every parameter and buffer: those are the canonical names
        prefix = mod_name + "." if mod_name else ""
        for key, value in vars(mod).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) and \
                    value.device == device and not value.is_meta:
                if _add(prefix + key, value, value, first, tensors, aliases):
                    attributes.append(prefix + key)
    metadata = {}
    if aliases:
        metadata[META_ALIASES] = json.dumps(aliases, sort_keys=True, separators=(",", ":"))
    if buffers:
        metadata[META_BUFFERS] = json.dumps(buffers, sort_keys=True, separators=(",", ":"))
    if attributes:
        metadata[META_ATTRIBUTES] = json.dumps(attributes, separators=(",", ":"))
    return ModuleTable(tensors, metadata)


def _add(name: str, obj, tensor, first: Dict[int, str], tensors: Dict[str, object],
         aliases: Dict[str, str]) -> bool:
    """Record obj under name; False when it is an alias of an earlier name."""
    canonical = first.get(id(obj))
    if canonical is not None:
        aliases[name] = canonical
        return False
    first[id(obj)] = name
    tensors[name] = tensor
    return True


def _decode(metadata: Mapping[str, str], key: str, value_type) -> dict:
    raw = metadata.get(key)
    if not raw:
        return {}
    try:
        out = json.loads(raw)
    except ValueError as exc:
        raise ModuleMismatchError([(key, f"metadata is not JSON: {exc}")]) from None
    if not isinstance(out, dict) or not all(isinstance(k, str) and isinstance(v, value_type) for k, v in out.items()):
        raise ModuleMismatchError([(key, f"metadata is not a JSON object of str to {value_type.__name__}")])
    return out


def install(model, tensors: Mapping[str, object], metadata: Mapping[str, str], *, check_shapes: bool = True,
            allow_new: bool = False, leftover_meta: str = "error", copy_buffers: bool = False) -> int:
    """Put tensors (canonical name → torch.Tensor, as module_table published
    them) into model, zero-copy; return how many were installed.

    check_shapes: a parameter or buffer the model already has must have the
    same shape and dtype as the attached one (False where the engine's
    post-processing legitimately reshapes, e.g. repacked quantized weights).
    allow_new: a name the model lacks may be added to its module (an engine's
    post-processing may add tensors); otherwise it is a mismatch.
    copy_buffers: buffers become private copies instead of aliases of the
    daemon's memory (an engine whose post-processing rewrites buffers in
    place, e.g. vLLM's attention scales, must not write into shared memory).
    leftover_meta: what to do with parameters and buffers still on the meta
    device afterwards: "error" (ModuleMismatchError naming them) or "keep"
    (the caller deals with them).

    Raises ModuleMismatchError listing every problem; the model is then
    partly filled and must be dropped.
    """
    import torch  # noqa: PLC0415

    aliases = _decode(metadata, META_ALIASES, str)
    buffers = _decode(metadata, META_BUFFERS, bool)
    attributes = set(_decode_list(metadata, META_ATTRIBUTES))
    modules = dict(model.named_modules(remove_duplicate=False))
    problems: List[Tuple[str, str]] = []
    replaced: Dict[int, object] = {}  # id(old tensor) → new object
    installed: Dict[str, object] = {}

    def put(name: str, new_obj, is_buffer: bool, persistent: bool, check: Optional[object]) -> None:
        mod_name, _, leaf = name.rpartition(".")
        mod = modules.get(mod_name)
        if mod is None:
            problems.append((name, f"the model has no module {mod_name!r}"))
            return
        if name in attributes or aliases.get(name) in attributes:
            old = vars(mod).get(leaf)
            if isinstance(old, torch.Tensor):
                replaced[id(old)] = new_obj
            object.__setattr__(mod, leaf, new_obj)
            installed[name] = new_obj
            return
        old = mod._parameters.get(leaf) if leaf in mod._parameters else mod._buffers.get(leaf)  # noqa: SLF001
        if old is None and not allow_new and not (leaf in mod._parameters or leaf in mod._buffers):  # noqa: SLF001
            problems.append((name, "the model has no such parameter or buffer"))
            return
        if check is not None and old is not None and check_shapes and \
                (tuple(old.shape) != tuple(check.shape) or old.dtype != check.dtype):
            problems.append((name, f"the model has {old.dtype}{list(old.shape)}, the daemon "
                                   f"{check.dtype}{list(check.shape)}"))
            return
        if old is not None:
            replaced[id(old)] = new_obj
        mod._parameters.pop(leaf, None)  # noqa: SLF001
        mod._buffers.pop(leaf, None)  # noqa: SLF001
        if is_buffer:
            mod.register_buffer(leaf, new_obj, persistent=persistent)
        else:
            mod.register_parameter(leaf, new_obj)
        installed[name] = new_obj

    for name, t in tensors.items():
        if name in attributes:
            put(name, t, False, False, None)
            continue
        if name in buffers:
            put(name, t.clone() if copy_buffers else t, True, buffers[name], t)
            continue
        mod_name, _, leaf = name.rpartition(".")
        mod = modules.get(mod_name)
        old = mod._parameters.get(leaf) if mod is not None else None  # noqa: SLF001
        put(name, _parameter_like(torch, old, t), False, True, t)
    for alias, canonical in aliases.items():
        obj = installed.get(canonical)
        if obj is None:
            problems.append((alias, f"alias of {canonical!r}, which the daemon does not hold"))
            continue
        put(alias, obj, canonical in buffers, buffers.get(canonical, True), None)
    if problems:
        raise ModuleMismatchError(problems)

    # Plain attributes that held a replaced meta tensor follow it.
    for mod in modules.values():
        for key, value in list(vars(mod).items()):
            if isinstance(value, torch.Tensor) and id(value) in replaced:
                setattr(mod, key, replaced[id(value)])
    if leftover_meta == "error":
        left = meta_tensors(model)
        if left:
            raise ModuleMismatchError([(n, "the daemon does not hold it (still on the meta device)") for n in left])
    return len(installed)


def _decode_list(metadata: Mapping[str, str], key: str) -> List[str]:
    raw = metadata.get(key)
    if not raw:
        return []
    try:
        out = json.loads(raw)
    except ValueError as exc:
        raise ModuleMismatchError([(key, f"metadata is not JSON: {exc}")]) from None
    if not isinstance(out, list) or not all(isinstance(v, str) for v in out):
        raise ModuleMismatchError([(key, "metadata is not a JSON list of str")])
    return out


def meta_tensors(model) -> List[str]:
    """Names of the parameters, buffers and tensor attributes of model that
    are still on the meta device."""
    import torch  # noqa: PLC0415

    out = []
    for mod_name, mod in model.named_modules():
        prefix = mod_name + "." if mod_name else ""
        for key, value in vars(mod).items():
            if isinstance(value, torch.Tensor) and value.is_meta:
                out.append(prefix + key)
        for table in (mod._parameters, mod._buffers):  # noqa: SLF001
            out += [prefix + k for k, v in table.items() if v is not None and v.is_meta]
    return out


def _parameter_like(torch, old, tensor):
    """A parameter over tensor (no copy) of old's class with old's Python
    attributes (vLLM sets weight loaders and shard dimensions on its
    parameters), not requiring grad."""
    if old is None or type(old) is torch.nn.Parameter or not isinstance(old, torch.nn.Parameter):
        new = torch.nn.Parameter(tensor, requires_grad=False)
    else:
        new = torch.Tensor._make_subclass(type(old), tensor, False)  # noqa: SLF001 - how Parameter is made
    if old is not None:
        for key, value in vars(old).items():
            if key not in vars(new):
                try:
                    setattr(new, key, value)
                except AttributeError:  # a read-only property of the subclass
                    pass
    return new
