"""Host tensors of a manifest built in bulk, not one Python call per tensor.

A 100k-tensor checkpoint (DeepSeek-class MoE models have ~90k tensors)
spent most of materialize's time in Python, a loop iteration per tensor
around one ``as_strided`` call on a base tensor (the handle's storage
viewed as the tensor's dtype). ``as_strided_views`` builds the same tensors
from the manifest's columns, per (handle, dtype) pair, without Python code
per tensor: tensors of one shape whose offsets step by a constant (the
same weight of consecutive layers or experts, possibly interleaved with
others of that shape) are one ``as_strided`` over the run and one
``unbind`` (C++ makes every tensor, about 0.6 µs each); the others are
``as_strided`` calls made by ``map`` (about 1.2–1.8 µs each, torch's own
cost). Each tensor is exactly what ``base.as_strided(shape, contiguous
strides, offset // element size)`` gives: shape, strides, storage offset,
data pointer, storage, an autograd view of the pair's base (its version
counter shared).

Tensors it leaves to materialize's per-tensor path (None in its result):
a layout (published views), an empty tensor, a dtype torch cannot view the
handle as, an offset not aligned for its dtype, a handle that is not host
memory.
"""

from __future__ import annotations

from collections import deque
from itertools import compress, groupby, islice, repeat
from operator import add, eq, floordiv, le, mod, mul, ne, not_, sub
from typing import Callable, Dict, List, Optional, Sequence, Tuple

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
            return strided(base, elsize, shapes, offsets, strides_of)
        mine = map(eq, pair, repeat(p)) if pair is not None else repeat(True, n)
        if skip is not None:
            mine = map(bool.__gt__, mine, skip)  # mine and not skip
        idx = list(compress(range(n), mine))
        offs = list(map(offsets.__getitem__, idx))
        if any(map(mod, offs, repeat(elsize))):  # misaligned for the dtype: the per-tensor path
            aligned = list(map(not_, map(mod, offs, repeat(elsize))))
            idx, offs = list(compress(idx, aligned)), list(compress(offs, aligned))
        deque(map(out.__setitem__, idx, strided(base, elsize, list(map(shapes.__getitem__, idx)), offs, strides_of)),
              maxlen=0)
    return out


# Fewest tensors per distinct shape for which looking for runs pays.
RUN_MIN = 8
# Interleavings tried: a run steps by m positions among its shape's
# tensors sorted by offset (m tensors of one shape per layer: q/k/v/o).
RUN_MAX_INTERLEAVE = 8


def strided(base, elsize: int, shapes: List[Tuple[int, ...]], offsets: List[int],
            strides_of: Dict[tuple, tuple]) -> List[object]:
    """base.as_strided(shape, contiguous strides, offset // elsize) for
    each shape and byte offset (each a multiple of elsize), in order: by
    runs where tensors of one shape step by a constant, else one by one.
    strides_of: the contiguous strides of every shape."""
    k = len(shapes)
    shape_ids = {s: i for i, s in enumerate(dict.fromkeys(shapes))}
    if len(shape_ids) * RUN_MIN > k:  # too few tensors per shape
        return list(map(base.as_strided, shapes, map(strides_of.__getitem__, shapes),
                        map(floordiv, offsets, repeat(elsize))))
    out: List[object] = [None] * k
    sid = list(map(shape_ids.__getitem__, shapes))
    for _, group in groupby(sorted(range(k), key=sid.__getitem__), sid.__getitem__):
        members = list(group)
        shape = shapes[members[0]]
        at = list(map(offsets.__getitem__, members))
        if not all(map(le, at, islice(at, 1, None))):
            members.sort(key=offsets.__getitem__)
            at = list(map(offsets.__getitem__, members))
        _runs(base, elsize, shape, strides_of[shape], members, at, out)
    return out


def _runs(base, elsize: int, shape: Tuple[int, ...], strides: Tuple[int, ...], members: List[int],
          at: List[int], out: List[object]) -> None:
    """Set out[members[j]] to the tensor of shape at byte offset at[j] (at
    ascending). With some m, most at[j + m] - at[j] (15 in 16) equal one step: each
    position class modulo m, cut where the step differs, is a run, one
    as_strided + unbind (a run of one: as_strided); without one, all one
    by one."""
    n = len(at)
    for m in range(1, min(RUN_MAX_INTERLEAVE + 1, n)):
        gaps = list(map(sub, islice(at, m, None), at))
        # The step: the commonest of a few samples (a cut may sit anywhere).
        step = max({gaps[0], gaps[len(gaps) // 3], gaps[2 * len(gaps) // 3], gaps[-1]}, key=gaps.count)
        if (len(gaps) - gaps.count(step)) * 16 <= len(gaps):
            break
    else:
        deque(map(out.__setitem__, members, map(base.as_strided, repeat(shape), repeat(strides),
                                                map(floordiv, at, repeat(elsize)))), maxlen=0)
        return
    cuts = list(compress(range(len(gaps)), map(ne, gaps, repeat(step))))
    for r in range(m):
        start = r
        for end in [c for c in cuts if c % m == r] + [r + (n - 1 - r) // m * m]:
            count = (end - start) // m + 1
            if count > 1:
                run = base.as_strided((count,) + shape, (step // elsize,) + strides, at[start] // elsize)
                deque(map(out.__setitem__, members[start:end + 1:m], run.unbind(0)), maxlen=0)
            else:
                out[members[start]] = base.as_strided(shape, strides, at[start] // elsize)
            start = end + m
