"""Host tensors of a manifest built in bulk: the per-tensor call made from C.

A 100k-tensor checkpoint (DeepSeek-class MoE models have ~90k tensors)
spent most of materialize's time in Python, a loop iteration per tensor
around one ``as_strided`` call on a base tensor (the handle's storage
viewed as the tensor's dtype). ``as_strided_views`` makes the same calls
with ``map`` over the manifest's columns, per (handle, dtype) pair: no
Python bytecode runs per tensor, only the call itself (torch's argument
parsing and the view's creation, about 1.5 µs). Each tensor is exactly what
that call gave before: shape, contiguous strides, storage offset, data
pointer, storage, an autograd view of the pair's base (its version counter
shared).

Tensors it leaves to materialize's per-tensor path (None in its result):
a layout (published views), an empty tensor, a dtype torch cannot view the
handle as, an offset not aligned for its dtype, a handle that is not host
memory.
"""

from __future__ import annotations

from collections import deque
from itertools import compress, repeat
from operator import add, eq, floordiv, mod, mul, not_
from typing import Callable, List, Optional, Sequence, Tuple

from .dtypes import contiguous_strides


def as_strided_views(shapes: List[Tuple[int, ...]], dtype_index: List[int], handle_index: List[int],
                     offsets: List[int], lengths: List[int], plain: Optional[Sequence[bool]],
                     base_of: Callable[[int, int], tuple]) -> List[Optional[object]]:
    """The host tensors of a manifest's columns, in manifest order (None:
    left to the per-tensor path).

    shapes, dtype_index, handle_index, offsets, lengths: the manifest's
    columns (checked by parse_manifest). plain[i]: tensor i has no layout
    (None: no tensor has one). base_of(handle, dtype index): (base tensor,
    element size) — the handle's whole storage viewed as that dtype
    (tensors.py's _HostViews) — or () when the handle is not host memory
    under torch or torch cannot view it as that dtype.
    """
    n = len(shapes)
    if not n:
        return []
    strides_of = {s: contiguous_strides(s) for s in dict.fromkeys(shapes)}
    n_dtypes = max(dtype_index) + 1
    if min(handle_index) == max(handle_index) and n_dtypes == 1 + min(dtype_index):
        pair = None  # one handle, one dtype: the common case, no per-tensor pair
        pairs = {handle_index[0] * n_dtypes + dtype_index[0]: n}
    else:
        pair = list(map(add, map(mul, handle_index, repeat(n_dtypes)), dtype_index))
        pairs = dict.fromkeys(pair)
    # Not built here: empty tensors and those with a layout.
    skip = list(map(not_, lengths)) if 0 in lengths else None
    if plain is not None:
        skip = [not p or bool(s) for p, s in zip(plain, skip or repeat(False))]
    out: List[Optional[object]] = [None] * n
    for p in pairs:
        found = base_of(p // n_dtypes, p % n_dtypes)
        if not found:
            continue
        base, elsize = found
        if pair is None and skip is None and not any(map(mod, offsets, repeat(elsize))):
            return list(map(base.as_strided, shapes, map(strides_of.__getitem__, shapes),
                            map(floordiv, offsets, repeat(elsize))))
        mine = map(eq, pair, repeat(p)) if pair is not None else repeat(True, n)
        if skip is not None:
            mine = map(bool.__gt__, mine, skip)  # mine and not skip
        idx = list(compress(range(n), mine))
        offs = list(map(offsets.__getitem__, idx))
        if any(map(mod, offs, repeat(elsize))):  # misaligned for the dtype: the per-tensor path
            aligned = list(map(not_, map(mod, offs, repeat(elsize))))
            idx, offs = list(compress(idx, aligned)), list(compress(offs, aligned))
        sh = list(map(shapes.__getitem__, idx))
        views = map(base.as_strided, sh, map(strides_of.__getitem__, sh), map(floordiv, offs, repeat(elsize)))
        deque(map(out.__setitem__, idx, views), maxlen=0)
    return out
