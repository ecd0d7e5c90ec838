"""Windows of windows: when fusing a producer would recompute a window many times.

A pooling window, a bilinear resize or a stencil reads its operand at several index
maps per output (one per tap: the strided slices of lower/pooling.py, the taps of a
resize).  Fused into its consumer, a producer is evaluated once per map at which the
consumer reads it.  That is free where the producer is one elementwise step (a ReLU
before a pool: its loads are the pool's anyway), and also where the consumer reads
each element once (a 2x2 stride-2 pool of a pool).  It is not where the producer is
a window itself and the consumer reads its elements several times: AvgPool3D(2) ->
MaxPool3D(2, stride 1, SAME) -> MaxPool1D(4) -> AvgPool1D(2) fused into one kernel read
the input 512 times per output, 1.37 ms against TF graph's 0.56 for the four pools
(a PSPNet-style average pool upsampled by a bilinear resize reads its window once per
tap per upsampled pixel).  XLA declines the same fusion (an expensive producer
whose consumer reuses operand elements); here the measure is the count itself:

* ``maps``: per value, the distinct index maps at which a kernel reads it: elementwise
  ops, reshapes, transposes and broadcasts pass their own on (they read no neighbour),
  any other op (slice, pad, concat, gather, ...) makes a new map per operand, so two
  taps of a pool are two maps and ``x * x`` or ``x - mean(x)`` one;
* a producer gets a kernel of its own when the kernel would evaluate it at least
  ``DUPLICATION_MIN`` times per element (the sum over its maps of the points each
  reads it at / its elements: a concatenation reads each operand over its range
  only) and it
  reads some value below it at ``WINDOW_MIN_TAPS`` or more maps itself (a window).

A rounding to bf16 or f16 is costly in itself (``duplicated_rounding``): it gets a
kernel of its own from ``ROUNDING_MIN_EVALUATIONS`` evaluations an element, window
or not.

The maps are hashes of (map of the user, user, operand position): different ops give
different maps even where they index alike, so the count errs towards more maps; sets
stop growing at ``MAX_MAPS`` (the decision only asks whether a count is small).
"""
from __future__ import annotations

import math

from tfjit import dtypes as dt
from tfjit.ir.module import Instr
from tfjit.ir.ops import Kind, Op
from tfjit.passes.kernels import in_memory

MAX_MAPS = 64
DUPLICATION_MIN = 2
WINDOW_MIN_TAPS = 4
ROUNDING_MIN_EVALUATIONS = 4
_LOOKAHEAD = 512          # values examined below a producer (compile time stays bounded)


# Ops that read their operand at one index per output index without shifting it among
# its neighbours: a value read through them by two paths is not read at two taps (a
# layer norm's gradient reads x through several reshapes and broadcasts, no window).
_SAME_TAP = frozenset({Op.RESHAPE, Op.TRANSPOSE, Op.BROADCAST, Op.CONVERT})


def _share(i: Instr, k: int) -> float:
    """The fraction of ``i``'s points at which it reads operand k: a concatenation
    reads each operand over its own range (a strided pool's gradient interleaves its
    window phases so, each read at a quarter of the points), anything else its
    operands at every point (a pad too: the taps that read it are its slices, which
    lie mostly inside the operand)."""
    if i.op is Op.CONCAT:
        return i.operands[k].shape[i.attrs["dim"]] / max(i.shape[i.attrs["dim"]], 1)
    return 1.0


def operand_maps(i: Instr, maps: dict) -> list:
    """Per operand of ``i``, the maps it is read at when ``i`` is read at ``maps``
    ({map: the fraction of the kernel's points at which it is read})."""
    if i.op.kind is Kind.ELEMENTWISE or i.op in _SAME_TAP:
        return [maps] * len(i.operands)
    return [{hash((m, id(i), k)): share * _share(i, k) for m, share in maps.items()}
            for k in range(len(i.operands))]


def add_maps(table: dict, i: Instr) -> None:
    """Records in ``table`` the maps at which ``i``'s operands are read, from ``i``'s."""
    for o, maps in zip(i.operands, operand_maps(i, table.get(i, {0: 1.0}))):
        have = table.setdefault(o, {})
        for m, share in maps.items():
            if len(have) >= MAX_MAPS:
                break
            have[m] = max(have.get(m, 0.0), share)


def _stops(i: Instr) -> bool:
    """Values a fused producer reads from memory (or from a kernel of their own)."""
    return in_memory(i) or i.op.kind in (Kind.LIBRARY, Kind.REDUCE, Kind.UPDATE)


def window_taps(i: Instr, order: dict) -> int:
    """The most maps at which the values below ``i`` (down to what it reads from
    memory) are read per evaluation of ``i``."""
    below, stack = set(), [i]
    while stack and len(below) < _LOOKAHEAD:
        v = stack.pop()
        if v in below:
            continue
        below.add(v)
        if not _stops(v):
            stack.extend(v.operands)
    table = {i: {0: 1.0}}
    for v in sorted(below, key=lambda v: -order.get(v, -1)):   # users before operands
        if not _stops(v) and v in table:
            add_maps(table, v)
    return max(len(m) for m in table.values())


def _evaluations(i: Instr, maps: dict, kernel_shape: tuple) -> float:
    """How many times a kernel over ``kernel_shape`` reading ``i`` at ``maps`` would
    compute each of its elements, fused."""
    return sum(maps.values()) * math.prod(kernel_shape) / max(i.size, 1)


def duplicated_rounding(i: Instr, maps: dict, kernel_shape: tuple) -> str | None:
    """Why rounding ``i`` (an f32 value converted to bf16 or f16), read at ``maps`` in a
    kernel over ``kernel_shape``, gets a kernel of its own; None where fusing it costs
    little.  A rounding is about eight vector instructions an element (registers hold
    halves as f32: codegen/elemental.py), and Keras's bf16 layers round after every
    step, so a stencil fused after a bf16 layer computed the layer's roundings at each
    tap: a 5x5 depthwise convolution after a bf16 1x1 convolution's bias and ReLU took
    2.14 ms, against 0.48 in f32.  From ``ROUNDING_MIN_EVALUATIONS`` evaluations an
    element the rounded value is written once, in its half type, and read back."""
    if i.op is not Op.CONVERT or i.dtype not in (dt.BF16, dt.F16) \
            or i.operands[0].dtype not in (dt.F32, dt.F64):
        return None
    evaluations = _evaluations(i, maps, kernel_shape)
    if evaluations < ROUNDING_MIN_EVALUATIONS:
        return None
    return (f"{i!r} gets a kernel of its own: a rounding to {i.dtype.name} that, fused, would be "
            f"computed {evaluations:.0f} times per element")


def duplicated_window(i: Instr, maps: dict, kernel_shape: tuple, order: dict) -> str | None:
    """Why window ``i``, read at ``maps`` in a kernel over ``kernel_shape``, gets a
    kernel of its own; None where fusing it costs little."""
    evaluations = _evaluations(i, maps, kernel_shape)
    if evaluations < DUPLICATION_MIN:
        return None
    taps = window_taps(i, order)
    if taps < WINDOW_MIN_TAPS:
        return None
    return (f"{i!r} gets a kernel of its own: fused, each of its elements would be computed "
            f"{evaluations:.0f} times, each a window of {taps}{'+' if taps >= MAX_MAPS else ''} "
            "reads")
