"""Handle kinds, and the registry where a vendor adds the mapper for its kind.

The core's kinds (``posix-shm``, ``cuda-ipc``, ``hip-ipc``, and the
descriptor kinds ``memfd`` and ``cuda-vmm-fd``) are built into this client.
Every other kind is a vendor kind named ``x-VENDOR-NAME`` (lowercase letters
and digits in '-'-separated words, at most 64 characters: ``x-acme-buf``);
the rule is sdk/names in the Go tree, and both are tested against the vectors in
sdk/names/testdata/handle-kinds.json. A vendor whose backend exports its own kind ships a mapper, and the
engine registers it::

    mappers = wcache.HandleMappers()
    mappers.register("x-acme-buf", acme.open_buffer)
    att = wcache.attach(config, mappers=mappers)
    weights = att.tensors()

A mapper is called once per handle of its kind as
``mapper(index, handle, context)`` with the handle's index in the manifest,
its HandleSpec (kind, data, size) and a MapContext, and returns a region: an
object whose ``tensor(spec)`` returns the tensor (any type: a torch.Tensor,
an array) for a TensorSpec of that handle. The region must keep the memory
mapped for as long as it or its tensors live. Nothing here is global: a
HandleMappers is a value handed to attach() or materialize().
"""

from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional

from ._errors import ProtocolError
from ._manifest import HANDLE_CUDA_IPC, HANDLE_CUDA_VMM_FD, HANDLE_HIP_IPC, HANDLE_MEMFD, HANDLE_POSIX_SHM

CORE_KINDS = tuple(sorted((HANDLE_POSIX_SHM, HANDLE_CUDA_IPC, HANDLE_HIP_IPC, HANDLE_MEMFD, HANDLE_CUDA_VMM_FD)))
VENDOR_PREFIX = "x-"
MAX_KIND_LEN = 64

DOC = "docs/python-client.md, \"Vendor handle kinds\""


class MapContext(NamedTuple):
    """What a mapper may need: the manifest's device, the ordinal the caller
    asked for (None: look it up by UUID), and the array libraries in use
    (torch or None; numpy or None)."""

    device_uuid: str
    device_index: Optional[int]
    torch: object
    numpy: object


Mapper = Callable[[int, object, MapContext], object]


def _vendor_kind_problem(kind: str) -> Optional[str]:
    """None for a well-formed vendor kind, else what is wrong with it."""
    if not kind:
        return "empty"
    if len(kind) > MAX_KIND_LEN:
        return f"{len(kind)} bytes long"
    if not kind.startswith(VENDOR_PREFIX):
        return f"not a core kind, and a vendor kind starts with {VENDOR_PREFIX}"
    words = kind[len(VENDOR_PREFIX):].split("-")
    if len(words) < 2:
        return "a vendor kind names the vendor and the kind: x-VENDOR-NAME"
    for w in words:
        if not w:
            return "empty word (two '-' in a row, or one at an end)"
        for c in w:
            if not ("a" <= c <= "z" or "0" <= c <= "9"):
                return f"{c!r} is not a lowercase letter or digit"
    return None


def is_vendor_kind(kind: str) -> bool:
    """True for a well-formed vendor kind x-VENDOR-NAME."""
    return _vendor_kind_problem(kind) is None


def validate_handle_kind(kind: str) -> None:
    """Accept a core kind or a vendor kind; raise ValueError otherwise."""
    if kind in CORE_KINDS:
        return
    problem = _vendor_kind_problem(kind)
    if problem is not None:
        raise ValueError(f"invalid handle kind {kind!r}: {problem} (a kind is one of the core's, "
                         f"{', '.join(CORE_KINDS)}, or a vendor kind x-VENDOR-NAME: lowercase letters and digits "
                         f"in '-'-separated words, at most {MAX_KIND_LEN} characters, e.g. x-acme-buf)")


class UnknownHandleKindError(ProtocolError):
    """A manifest handle is of a kind this client cannot map: not built in and
    no mapper registered for it. ``kind`` and ``index`` name the handle."""

    def __init__(self, index: int, kind: str, registered: List[str]):
        self.index = index
        self.kind = kind
        self.registered = list(registered)
        built_in = ", ".join(CORE_KINDS)
        msg = (f"handle {index} is of kind {kind!r}, which this client cannot map: it is not built in "
               f"({built_in}) and no mapper is registered for it (registered: "
               f"{', '.join(self.registered) or 'none'})")
        if is_vendor_kind(kind):
            msg += (f". {kind!r} is a vendor kind: install the vendor's mapper and register it, "
                    f"mappers = wcache.HandleMappers(); mappers.register({kind!r}, mapper); "
                    f"wcache.attach(..., mappers=mappers) (see {DOC})")
        else:
            msg += ". It is not a vendor kind (x-VENDOR-NAME) either: the daemon's backend breaks the naming rule"
        super().__init__(msg)


class HandleMappers:
    """Mappers for vendor handle kinds, by kind (see the module's docstring)."""

    def __init__(self) -> None:
        self._by_kind: Dict[str, Mapper] = {}

    def register(self, kind: str, mapper: Mapper) -> None:
        """Add mapper for the vendor kind kind.

        Raises ValueError for a kind that is not x-VENDOR-NAME (the core's
        kinds are built in and cannot be replaced here), for a kind already
        registered, and TypeError for a mapper that is not callable.
        """
        if kind in CORE_KINDS:
            raise ValueError(f"handle kind {kind!r} is one of the core's; this client maps it itself")
        validate_handle_kind(kind)
        if not callable(mapper):
            raise TypeError(f"mapper for {kind!r} must be callable, not {type(mapper).__name__}")
        if kind in self._by_kind:
            raise ValueError(f"a mapper is already registered for handle kind {kind!r}")
        self._by_kind[kind] = mapper

    def lookup(self, kind: str) -> Optional[Mapper]:
        """The mapper registered for kind, or None."""
        return self._by_kind.get(kind)

    def kinds(self) -> List[str]:
        """The registered kinds, sorted."""
        return sorted(self._by_kind)
