"""Lowerings of TF's data-dependent indexing ops (issue 4, part 2).

* GatherV2 / Gather / ResourceGather -> IR ``gather`` (elemental, fuses both ways);
  an index outside [0, n) is TF's InvalidArgumentError at run time.
* UnsortedSegment{Sum,Prod,Max,Min} -> IR ``scatter`` on [N, C] data (the
  dense form of an IndexedSlices gradient: tape gradients of tf.gather and of
  embedding lookups convert with UnsortedSegmentSum); Segment{Sum,Prod,Max,Min}V2,
  which only XLA runs, the same way with ids past num_segments dropped.
* Cumsum / Cumprod -> IR ``scan``; TopKV2 -> IR ``top-k`` (the indices)
  plus a gather of the values at them.  (OneHot is in nn.py.)

Shape-like operands (axis, num_segments, k) must be compile-time
constants.  Scatters and scans compute in the op's own type: half precision
rounds at every step, as TF's CPU kernels do.
"""
from __future__ import annotations

import math

from tfjit import dtypes as dt
from tfjit.ir.module import INDEX_DTYPES, Instr, scatter_identity
from tfjit.ir.ops import Op
from tfjit.lower.registry import ALL, NUMERIC, QUANTIZED_MOVES, InvalidArgument, Unsupported, broadcast_to, register
from tfjit.lower.variables import _declared, _var


def _index(ctx, x: Instr) -> Instr:
    """An index operand as i32/i64 (TF also allows int16 indices and uint8 one-hot)."""
    if x.dtype in INDEX_DTYPES:
        return x
    if not x.dtype.is_int:
        raise Unsupported(f"{ctx.node.op}: {x.dtype} indices")
    return ctx.m.convert(x, dt.I64)


def _axis(ctx, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise Unsupported(f"{ctx.node.op}: expected {what} in the range [{-rank}, {rank}), but got {axis}")
    return axis % rank


def gather(ctx, params: Instr, indices: Instr, axis: int, batch_dims: int) -> Instr:
    """TF's GatherV2 semantics (negative axis and batch_dims count from the end)."""
    if params.rank == 0:
        raise Unsupported(f"{ctx.node.op}: params must be at least 1 dimensional")
    axis = _axis(ctx, axis, params.rank, "axis")
    if batch_dims < 0:
        batch_dims += indices.rank
    if not 0 <= batch_dims <= indices.rank or batch_dims > axis:
        raise Unsupported(f"{ctx.node.op}: batch_dims={batch_dims} must be in [0, rank(indices)="
                          f"{indices.rank}] and at most axis={axis}")
    if params.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise Unsupported(f"{ctx.node.op}: params.shape {list(params.shape)} and indices.shape "
                          f"{list(indices.shape)} differ in their first {batch_dims} (batch) dims")
    return ctx.m.gather(params, _index(ctx, indices), axis, batch_dims)


@register("GatherV2", "Gather", dtypes=ALL, const_inputs=(2,), quantized=QUANTIZED_MOVES)
def _gather(ctx):
    axis = ctx.const_ints(2, "GatherV2's axis")[0] if ctx.node.op == "GatherV2" else 0
    return gather(ctx, ctx.inputs[0], ctx.inputs[1], axis, int(ctx.attr("batch_dims", 0)))


@register("ResourceGather", dtypes=ALL)
def _resource_gather(ctx):
    """A gather from a resource variable's value (read at the cluster's start)."""
    v = _var(ctx)
    _declared(ctx, v)
    return gather(ctx, v.value, ctx.inputs[1], 0, int(ctx.attr("batch_dims", 0)))


@register("ReverseSequence", dtypes=ALL)
def _reverse_sequence(ctx):
    """For each batch b, the first seq_lengths[b] elements along seq_dim reversed, the
    rest as they are: a gather along seq_dim at where(t < len, len - 1 - t, t), one index
    row per batch (batch dim and seq dim moved to the front).  A length beyond the seq
    dim is an out-of-range index: TF's InvalidArgumentError at run time."""
    m, (x, lengths) = ctx.m, ctx.inputs[:2]
    seq = _axis(ctx, int(ctx.attr("seq_dim")), x.rank, "seq_dim")
    batch = _axis(ctx, int(ctx.attr("batch_dim", 0)), x.rank, "batch_dim")
    if seq == batch or lengths.shape != (x.shape[batch],):
        raise Unsupported(f"ReverseSequence of {list(x.shape)}: seq_dim {seq}, batch_dim {batch} "
                          f"and seq_lengths {list(lengths.shape)} do not fit")
    lengths = _index(ctx, lengths)
    n, steps = x.shape[batch], x.shape[seq]
    t = m.iota(lengths.dtype, (n, steps), 1)
    length = m.broadcast(lengths, (n, steps), (0,))
    one = broadcast_to(m, m.scalar(1, lengths.dtype), (n, steps))
    flipped = m.elementwise(Op.SUB, m.elementwise(Op.SUB, length, one), t)
    index = m.elementwise(Op.SELECT, m.elementwise(Op.LT, t, length), flipped, t)
    perm = (batch, seq) + tuple(d for d in range(x.rank) if d not in (batch, seq))
    moved = m.transpose(x, perm) if perm != tuple(range(x.rank)) else x
    out = m.gather(moved, index, 1, batch_dims=1)
    back = tuple(perm.index(d) for d in range(x.rank))
    return m.transpose(out, back) if perm != tuple(range(x.rank)) else out


_SEGMENT_KINDS = {"Sum": "sum", "Prod": "prod", "Max": "max", "Min": "min"}


@register("UnsortedSegmentSum", "UnsortedSegmentProd", "UnsortedSegmentMax",
          "UnsortedSegmentMin", dtypes=NUMERIC, const_inputs=(2,))
def _unsorted_segment(ctx):
    """data[ids.shape + inner] -> [num_segments] + inner; negative ids are dropped, an
    id >= num_segments is TF's InvalidArgumentError at run time."""
    return _segment(ctx, _SEGMENT_KINDS[ctx.node.op[len("UnsortedSegment"):]], drop_beyond=False)


@register("SegmentSumV2", "SegmentProdV2", "SegmentMaxV2", "SegmentMinV2", dtypes=NUMERIC,
          const_inputs=(2,))
def _segment_v2(ctx):
    """The segment ops with a ``num_segments`` input, which TF has no CPU kernel for (only
    XLA runs them): XLA's definition, a scatter that drops ids outside [0, num_segments),
    and an empty segment holds 0, 1, or the type's lowest/highest value."""
    if ctx.inputs[1].rank != 1:
        raise Unsupported(f"{ctx.node.op}: segment_ids should be a vector, got shape "
                          f"{list(ctx.inputs[1].shape)}")
    return _segment(ctx, _SEGMENT_KINDS[ctx.node.op[len("Segment"):-len("V2")]], drop_beyond=True,
                    nan_ignored=True)


def _segment(ctx, kind: str, drop_beyond: bool, nan_ignored: bool = False):
    """``nan_ignored``: max/min as XLA:CPU computes them (measured: a NaN never wins, a
    segment of NaNs alone holds the identity), where TF's CPU kernel keeps whichever of a
    NaN and a number came last: NaNs become the identity before the scatter."""
    m, (data, ids) = ctx.m, ctx.inputs[:2]
    (segments,) = ctx.const_ints(2, "num_segments")
    if segments < 0:
        raise Unsupported(f"{ctx.node.op}: num_segments must be non-negative, got {segments}")
    if data.shape[:ids.rank] != ids.shape:
        raise Unsupported(f"{ctx.node.op}: data.shape {list(data.shape)} does not start with "
                          f"segment_ids.shape {list(ids.shape)}")
    inner = data.shape[ids.rank:]
    flat = m.reshape(data, (ids.size, math.prod(inner)))
    ids = m.reshape(_index(ctx, ids), (ids.size,))
    if drop_beyond:      # ids past the end are dropped as negative ones are
        beyond = m.elementwise(Op.GE, ids, broadcast_to(m, m.scalar(segments, ids.dtype), ids.shape))
        ids = m.elementwise(Op.SELECT, beyond, broadcast_to(m, m.scalar(-1, ids.dtype), ids.shape), ids)
    if nan_ignored and kind in ("max", "min") and flat.dtype.is_float:
        identity = broadcast_to(m, m.scalar(scatter_identity(kind, flat.dtype), flat.dtype), flat.shape)
        flat = m.elementwise(Op.SELECT, m.elementwise(Op.IS_NAN, flat), identity, flat)
    out = m.scatter(flat, ids, kind, segments)
    return m.reshape(out, (segments,) + inner)


_RESOURCE_SCATTER = {"Add": "sum", "Sub": "sub", "Mul": "prod", "Div": "div", "Min": "min_acc",
                     "Max": "max_acc", "Update": "assign"}


@register(*(f"ResourceScatter{k}" for k in _RESOURCE_SCATTER), dtypes=NUMERIC, type_attr="dtype")
def _resource_scatter(ctx):
    """var[indices[j]] (op)= updates[j], j in input order (TF's scatter functor: an embedding
    table's sparse SGD step is ResourceScatterSub); an index outside [0, rows) is TF's
    InvalidArgumentError at run time.  Updates are [] (every row) or indices.shape +
    var.shape[1:]."""
    m, v = ctx.m, _var(ctx)
    _declared(ctx, v)
    ids, updates = ctx.inputs[1], ctx.inputs[2]
    value, kind = v.value, _RESOURCE_SCATTER[ctx.node.op[len("ResourceScatter"):]]
    if kind == "div" and not value.dtype.is_float:
        raise Unsupported(f"{ctx.node.op} on {value.dtype}: TF's kernel divides by zero unchecked")
    if value.rank == 0:
        raise Unsupported(f"{ctx.node.op}: the variable must be at least 1-D")
    if updates.dtype is not value.dtype:
        raise Unsupported(f"{ctx.node.op}: {updates.dtype} updates for a {value.dtype} variable")
    want = ids.shape + value.shape[1:]
    if updates.rank == 0:
        updates = broadcast_to(m, updates, want)
    if updates.shape != want:
        raise Unsupported(f"{ctx.node.op}: updates of shape {list(updates.shape)} must be [] or "
                          f"indices.shape + var.shape[1:] = {list(want)}")
    columns = math.prod(value.shape[1:])
    out = m.scatter(m.reshape(updates, (ids.size, columns)), m.reshape(_index(ctx, ids), (ids.size,)),
                    kind, value.shape[0], init=m.reshape(value, (value.shape[0], columns)),
                    bounds="index", index_shape=ids.shape)
    v.assign(m.reshape(out, value.shape))
    return []


def _scan_axis(ctx) -> int:
    """The scan's axis, normalised.  An axis that is not a scalar, or out of range, is
    TF's kernel's InvalidArgumentError, in its words (ScanOp)."""
    x, axis_input = ctx.inputs[0], ctx.inputs[1]
    if x.rank == 0:
        raise Unsupported(f"{ctx.node.op}: input must be at least rank 1")
    if axis_input.rank != 0:
        raise InvalidArgument("ScanOp: axis must be a scalar, not "
                              f"[{','.join(map(str, axis_input.shape))}]")
    (axis,) = ctx.const_ints(1, f"{ctx.node.op}'s axis")
    if not -x.rank <= axis < x.rank:
        raise InvalidArgument(f"ScanOp: Expected scan axis in the range [{-x.rank}, {x.rank}), "
                              f"but got {axis}")
    return axis % x.rank


@register("Cumsum", "Cumprod", dtypes=NUMERIC, const_inputs=(1,))
def _cumulative(ctx):
    kind = "sum" if ctx.node.op == "Cumsum" else "prod"
    return ctx.m.scan(ctx.inputs[0], kind, _scan_axis(ctx), bool(ctx.attr("exclusive")),
                      bool(ctx.attr("reverse")))


@register("CumulativeLogsumexp", dtypes=(dt.F16, dt.BF16, dt.F32, dt.F64), const_inputs=(1,))
def _cumulative_logsumexp(ctx):
    """log(cumsum(exp(x))) without overflow: a scan whose step is max + log1p(exp(min -
    max)), as TF's kernel (ir/interp.py ``_log_add_exp``)."""
    return ctx.m.scan(ctx.inputs[0], "logsumexp", _scan_axis(ctx), bool(ctx.attr("exclusive")),
                      bool(ctx.attr("reverse")))


@register("TopKV2", dtypes=NUMERIC, const_inputs=(1,))
def _top_k(ctx):
    """Values and indices of the k largest along the last dim, largest first, ties by
    lower index.  ``sorted=False`` is compiled sorted (TF leaves that order unspecified).
    NaN ranks above every number (TF's own NaN order depends on which algorithm its
    kernel picks for k; XLA ranks NaN first too)."""
    m, x = ctx.m, ctx.inputs[0]
    (k,) = ctx.const_ints(1, "TopKV2's k")
    if k < 0:
        raise Unsupported(f"{ctx.node.op}: need k >= 0, got {k}")
    if x.rank == 0 or x.shape[-1] < k:
        raise Unsupported(f"{ctx.node.op}: input of shape {list(x.shape)} must have at least "
                          f"k={k} columns")
    index_type = ctx.attr("index_type")
    out = index_type.ir if index_type is not None else dt.I32
    indices = m.top_k(x, k, out if out in INDEX_DTYPES else dt.I32)
    values = m.gather(x, indices, x.rank - 1, x.rank - 1)
    return values, m.convert(indices, out)
