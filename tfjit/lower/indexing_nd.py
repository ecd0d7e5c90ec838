"""Lowerings of TF's N-d indexing ops: GatherNd, ScatterNd, TensorScatter{Update,Add,
Sub,Min,Max} and ResourceScatterNd{Update,Add,Sub,Min,Max}.

Each is the 1-d form on a flattened operand: an index vector ``indices[..., :K]``
into the first K dims of the shape becomes one linear index (row-major), and the
K dims one, so a gather is an IR ``gather`` along axis 0 and a scatter an IR
``scatter`` (lower/indexing.py's, in input order, TF's scatter functor).  An index
vector with any component outside its dim is TF's InvalidArgumentError at run time
(as on TF's CPU): such a vector's linear index is made -1, which the gather and the
scatter refuse, naming its position in ``indices``.
"""
from __future__ import annotations

import math

from tfjit import dtypes as dt
from tfjit.ir.module import Instr
from tfjit.ir.ops import Op
from tfjit.lower.indexing import _index
from tfjit.lower.registry import ALL, NUMERIC, QUANTIZED_8_32, Unsupported, broadcast_to, register
from tfjit.lower.variables import _declared, _var


def linear_index(ctx, indices: Instr, shape: tuple) -> Instr:
    """``indices[..., K]`` into ``shape[:K]`` -> i64 ``[...]`` row-major linear indices,
    -1 where a component is out of range."""
    m = ctx.m
    k = indices.shape[-1]
    batch = indices.shape[:-1]
    if k > len(shape):
        raise Unsupported(f"{ctx.node.op}: index vectors of length {k} for a rank-{len(shape)} shape")
    idx = m.convert(_index(ctx, indices), dt.I64) if indices.dtype is not dt.I64 else indices

    def scalar(v, d=dt.I64):
        return broadcast_to(m, m.scalar(v, d), batch)
    linear, bad = scalar(0), scalar(False, dt.PRED)
    for j in range(k):
        c = m.reshape(m.slice(idx, (0,) * len(batch) + (j,), batch + (1,)), batch)
        linear = m.elementwise(Op.ADD, m.elementwise(Op.MUL, linear, scalar(shape[j])), c)
        out = m.elementwise(Op.OR, m.elementwise(Op.LT, c, scalar(0)),
                            m.elementwise(Op.GE, c, scalar(shape[j])))
        bad = m.elementwise(Op.OR, bad, out)
    return m.elementwise(Op.SELECT, bad, scalar(-1), linear)


def _indices(ctx, indices: Instr) -> Instr:
    if indices.rank == 0:
        raise Unsupported(f"{ctx.node.op}: indices must be at least a vector")
    return indices


@register("GatherNd", dtypes=ALL, type_attr="Tparams", quantized=QUANTIZED_8_32)
def _gather_nd(ctx):
    m, params, indices = ctx.m, ctx.inputs[0], _indices(ctx, ctx.inputs[1])
    k = indices.shape[-1]
    if k > params.rank:
        raise Unsupported(f"{ctx.node.op}: index innermost dimension length must be <= params "
                          f"rank; saw: {k} vs. {params.rank}")
    rows = math.prod(params.shape[:k])
    if rows == 0 and indices.size:
        raise Unsupported(f"{ctx.node.op}: requested more than 0 entries, but params is empty")
    flat = m.reshape(params, (rows,) + params.shape[k:])
    return m.gather(flat, linear_index(ctx, indices, params.shape), 0)


def _scatter_nd(ctx, kind: str, init: Instr | None, indices: Instr, updates: Instr, shape: tuple):
    """``init`` (or zeros) with ``updates[j]`` combined at ``indices[j]``, j in order."""
    m = ctx.m
    indices = _indices(ctx, indices)
    k = indices.shape[-1]
    want = indices.shape[:-1] + tuple(shape[k:])
    if k > len(shape) or updates.shape != want:
        raise Unsupported(f"{ctx.node.op}: updates of shape {list(updates.shape)} for indices "
                          f"{list(indices.shape)} into shape {list(shape)}: must be {list(want)}")
    if init is not None and updates.dtype is not init.dtype:
        raise Unsupported(f"{ctx.node.op}: {updates.dtype} updates for a {init.dtype} tensor")
    if updates.dtype is dt.PRED:          # the IR's scatter moves numbers: bools as u8
        wide = _scatter_nd(ctx, kind, m.convert(init, dt.U8), indices, m.convert(updates, dt.U8),
                           shape)
        return m.convert(wide, dt.PRED)
    segments, columns = math.prod(shape[:k]), math.prod(shape[k:])
    n = math.prod(indices.shape[:-1])
    start = None if init is None else m.reshape(init, (segments, columns))
    if start is None and kind != "sum":
        start = broadcast_to(m, m.scalar(0, updates.dtype), (segments, columns))
    out = m.scatter(m.reshape(updates, (n, columns)), m.reshape(linear_index(ctx, indices, shape), (n,)),
                    kind, segments, init=start, bounds="index", index_shape=indices.shape[:-1])
    return m.reshape(out, tuple(shape))


@register("ScatterNd", dtypes=NUMERIC, const_inputs=(2,))
def _scatter_nd_op(ctx):
    """zeros(shape) with the updates added at the indices (duplicates add up)."""
    indices, updates = ctx.inputs[0], ctx.inputs[1]
    shape = tuple(ctx.const_ints(2, "ScatterNd's shape"))
    if any(d < 0 for d in shape):
        raise Unsupported(f"{ctx.node.op}: shape {list(shape)} has a negative dim")
    return _scatter_nd(ctx, "sum", None, indices, updates, shape)


_KINDS = {"Update": "assign", "Add": "sum", "Sub": "sub", "Min": "min_acc", "Max": "max_acc"}


@register(*(f"TensorScatter{k}" for k in _KINDS if k != "Update"), dtypes=NUMERIC)
@register("TensorScatterUpdate", dtypes=ALL)     # TF's CPU kernel takes bool too (Keras's masks)
def _tensor_scatter(ctx):
    tensor, indices, updates = ctx.inputs
    return _scatter_nd(ctx, _KINDS[ctx.node.op[len("TensorScatter"):]], tensor, indices, updates,
                       tensor.shape)


@register(*(f"ResourceScatterNd{k}" for k in _KINDS), dtypes=NUMERIC)
def _resource_scatter_nd(ctx):
    v = _var(ctx)
    _declared(ctx, v, attr="T")
    kind = _KINDS[ctx.node.op[len("ResourceScatterNd"):]]
    v.assign(_scatter_nd(ctx, kind, v.value, ctx.inputs[1], ctx.inputs[2], v.value.shape))
    return []
