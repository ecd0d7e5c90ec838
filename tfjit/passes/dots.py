"""Dot rewrites: shapes of library calls that TF's kernels run faster.

``FoldBatchIntoContraction``: a batched dot summed over its batch dim is one dot
whose contraction runs over the batch too.  TF's gradient of ``x @ w`` for a
batched ``x`` [B, T, K] and a matrix ``w`` is ``reduce_sum(x^T @ g, axis=0)``:
B products of [K, T] x [T, N], written as a [B, K, N] temporary (8 MB for the
encoder block's MLP weights), then summed by a column reduction.  With x^T stored
transposed (``transpose_lhs``) and g not, the batches of both operands are
consecutive rows, so reshapes (no data moves) give x as [B*T, K] and g as
[B*T, N], and ``x^T @ g`` over B*T rows is the sum: one matrix product with a
longer contraction, no temporary, no reduction kernel.  On 2 cores (interleaved,
oneDNN's kernels) the encoder block's [8,128,1024]^T x [8,128,256] gradient took
15.7 ms folded against 18.4 ms batched and summed, the [256]-wide ones 3.9 against
6.7 ms.  The sum's order changes (TF adds the B products last); results agree within
float tolerance, as any two GEMM blockings do.

``DotsAsReductions``: a product one of whose sides is a vector (M = 1 or N = 1), or
whose contraction is one element (K = 1), is a multiply and a sum over K, as XLA's
algebraic simplifier rewrites it ("dot strength reduction").  A library call has its
fixed cost and no fusion with what produces and reads its operands; TF's MatMul on a
matrix-vector product of a tall thin matrix is slow besides:
``tf.image.rgb_to_grayscale`` of [32, 224, 224, 3] is a [1605632, 3] x [3, 1] product,
2.7 ms in TF's MatMul against XLA's 1.3 ms for the whole op (2026-12-07, 2 cores).
As a reduction it is a row kernel reading 3 floats a pixel; a vector times a matrix
is a column reduction over the matrix's rows; K = 1 (the input gradient of a
``Dense(1)``) is an outer product, elementwise.  The sum's order is the reduction's,
not the GEMM's: results agree within float tolerance.

``Bf16Products``: a product of two bfloat16 values is a bfloat16 dot, and a 2-D or
3-D convolution or gradient of two a bfloat16 call (0.55-0.64x graph's speed before,
in f32, on Zen 4; Keras's Conv3D layer model 0.84x).  TF lowers to
``convert_bf16(dot(convert_f32(a), convert_f32(b)))`` (lower/registry.py's
half_in_f32): the widening is exact and the one rounding is at the end, which is what
TF's bf16 MatMul computes too (its kernels accumulate in f32).  As a bf16 dot the
runtime runs TF's oneDNN bf16 kernel where TF runs oneDNN (AVX512-BF16's vdpbf16ps,
or AMX: a [4096,1024] x [1024,1024] product in 19.7 ms on 2 Zen 4 cores against 37
in f32, graph mode's own speed; 2026-12-07), and elsewhere widens the operands
itself, runs the f32 product and rounds once (runtime/tf_kernels.cc DotBf16): the
same arithmetic as before, its converts now in the call.  Keras's mixed_bfloat16
policy makes exactly this pattern of every Dense and attention product.

Tried and not kept: merging products of one operand with several weights (Q/K/V,
SwiGLU's gate and up) into one product over concatenated weights, as XLA's GPU
DotMerger does.  oneDNN ran one [1024,256] x [256,768] product faster than three
[256,256] ones (4.5 against 3 x 2.1 ms), but in the blocks the copy of the
weights and the sliced reads ate it: +1% on the encoder's forward, -5% on
SwiGLU's (p10 of 60 shuffled rounds, 2026-12-04).
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.passes.cost import library_flops
from tfjit.passes.simplify import only_reader, substitute


class FoldBatchIntoContraction:
    """``reduce_sum(transpose(dot(a, b, transpose_lhs=1, transpose_rhs=0), (1, 2, 0)))``
    over the batch dim, with neither operand broadcast and the dot and transpose read
    by nothing else, becomes ``dot(reshape(a, [B*K, M]), reshape(b, [B*K, N]),
    transpose_lhs=1)``.  The old dot and transpose are left for DCE."""
    name = "fold-batch-into-contraction"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, m: Module) -> bool:
        users, outputs = m.users(), set(m.outputs)
        return substitute(m, lambda i: _folded(i, users, outputs))


def _source(x: Instr) -> Instr:
    """What a chain of reshapes reshapes: a new reshape reads it directly, since fusion
    reads a library operand in place through one reshape, not through two."""
    while x.op is Op.RESHAPE:
        x = x.operands[0]
    return x


def _folded(r: Instr, users: dict, outputs: set) -> list | None:
    """[reshape of a, reshape of b, the dot] replacing reduction ``r``, or None."""
    if r.op is not Op.REDUCE or r.attrs.get("kind") != "sum" or r.attrs.get("ndims") != 1:
        return None
    t = r.operands[0]
    if t.op is not Op.TRANSPOSE or t.attrs["perm"] != (1, 2, 0) or not only_reader(t, r, users, outputs):
        return None
    d = t.operands[0]
    if d.op is not Op.DOT or d.rank != 3 or not only_reader(d, t, users, outputs):
        return None
    if (d.attrs["transpose_lhs"], d.attrs["transpose_rhs"]) != (1, 0):
        return None
    a, b = d.operands
    batch = d.shape[0]
    if a.shape[0] != batch or b.shape[0] != batch:      # a broadcast operand: not a sum of products
        return None
    rows = batch * a.shape[1]
    a2 = Instr(Op.RESHAPE, a.dtype, (rows, a.shape[2]), (_source(a),), name=f"{r.name}.lhs",
               source=d.source)
    b2 = Instr(Op.RESHAPE, b.dtype, (rows, b.shape[2]), (_source(b),), name=f"{r.name}.rhs",
               source=d.source)
    dot = Instr(Op.DOT, d.dtype, r.shape, (a2, b2), {"transpose_lhs": 1, "transpose_rhs": 0},
                name=r.name, source=d.source)
    return [a2, b2, dot]


class DotsAsReductions:
    """``dot(a, b)`` with M = 1, N = 1 or K = 1 becomes ``reduce_sum(broadcast(a') *
    broadcast(b'), K)`` over [B, M, N, K] (a' = a as [B, M, K], b' = b as [B, N, K],
    each a transpose where stored the other way; module docstring)."""
    name = "dots-as-reductions"

    def run(self, m: Module) -> bool:
        return any([substitute(c, _as_reduction) for c in m.computations() + [m]])


def _as_reduction(d: Instr) -> list | None:
    """The instructions computing vector dot ``d`` as a product and a sum, or None."""
    if d.op is not Op.DOT or not d.size:
        return None
    a, b = d.operands
    *batch, rows, cols = d.shape
    k = a.shape[-2] if d.attrs["transpose_lhs"] else a.shape[-1]
    if 1 not in (rows, cols, k):
        return None
    made = Module("dots")
    made.source = d.source
    lhs = _swapped(made, a) if d.attrs["transpose_lhs"] else a        # [B, M, K]
    rhs = b if d.attrs["transpose_rhs"] else _swapped(made, b)        # [B, N, K]
    # over [B, M, N, K] without the unit M or N: a reduction whose rows are the result's
    kept = [size for size in (rows, cols) if size != 1]
    full = tuple(batch) + tuple(kept) + (k,)
    lead, at = tuple(range(len(batch))), len(batch)
    lhs = made.reshape(lhs, tuple(lhs.shape[:-2]) + lhs.shape[-1:]) if rows == 1 else lhs
    rhs = made.reshape(rhs, tuple(rhs.shape[:-2]) + rhs.shape[-1:]) if cols == 1 else rhs
    m_at = () if rows == 1 else (at,)
    n_at = () if cols == 1 else (at + len(m_at),)
    product = made.elementwise(Op.MUL, made.broadcast(lhs, full, lead + m_at + (len(full) - 1,)),
                               made.broadcast(rhs, full, lead + n_at + (len(full) - 1,)))
    # K = 1: the GEMM's sum from +0 still makes -0 + 0 = +0 (a ReLU gradient's zeros)
    total = made.reduce(product, "sum", 1) if k != 1 else made.elementwise(
        Op.ADD, product, made.broadcast(made.scalar(0.0, d.dtype), full, ()))
    made.reshape(total, d.shape)
    for n, i in enumerate(made.instrs):     # (the builder's names would repeat the module's)
        i.name = f"{d.name}.v{n}"
    made.instrs[-1].name = d.name
    return made.instrs


def _swapped(made: Module, x: Instr) -> Instr:
    """x with its last two dims swapped: a reshape where one is a unit dim (the same
    bytes), else a transpose."""
    shape = tuple(x.shape[:-2]) + (x.shape[-1], x.shape[-2])
    if 1 in x.shape[-2:]:
        return made.reshape(x, shape)
    return made.transpose(x, tuple(range(x.rank - 2)) + (x.rank - 1, x.rank - 2))


class Bf16Products:
    """``convert_bf16(dot(convert_f32(a), convert_f32(b)))`` with a and b bf16, the dot
    read by that convert alone, becomes the bf16 ``dot(a, b)`` (module docstring); a 2-D
    or 3-D convolution or one of its gradients likewise.
    Reshapes and transposes between the converts and the dot (Keras's einsums, a
    batch collapsed for MatMul) move with them: they move the same values in bf16."""
    name = "bf16-products"
    option = "bf16_calls"       # run where pipeline.Options.bf16_calls (the target asks)

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, m: Module) -> bool:
        users, outputs = m.live_users(), set(m.outputs)
        return substitute(m, lambda i: _bf16_product(i, users, outputs))


_MOVES = (Op.RESHAPE, Op.TRANSPOSE)
# the library calls with a bf16 kernel (runtime/tf_bf16.cc)
BF16_CALLS = (Op.DOT, Op.CONV, Op.CONV_BACKPROP_INPUT, Op.CONV_BACKPROP_FILTER, Op.CONV3D,
              Op.CONV3D_BACKPROP_INPUT, Op.CONV3D_BACKPROP_FILTER)
# Smaller calls stay f32 between converts: oneDNN's bf16 kernels carry a fixed cost per
# call (2 Zen 4 cores, 2026-12-07, against the f32 call on the widened operands, in one
# process): a batched [16,10,32]x[16,32,16] product 0.60x as fast, a 3x3 convolution over
# 256 positions 0.69x, over 2304 (2.6M multiply-adds) 0.88x; from 4.2M multiply-adds up
# 1.2-3.2x faster; and a call that widens its own operands loses to converts fused with
# their producers and readers (a GRU's [32,24]x[24,192] step products: 25 us a call
# against 2 us, its predict step 0.35 -> 0.81 ms).
BF16_CALL_FLOPS = 1 << 23


def _bf16_source(x: Instr) -> tuple | None:
    """(the bf16 value, [the moves from it up to x]) where x is a convert to f32 of a bf16
    value seen through reshapes and transposes, else None."""
    path = []
    while x.op in _MOVES:
        path.append(x)
        x = x.operands[0]
    if x.op is Op.CONVERT and x.operands[0].dtype is dt.BF16:
        return x.operands[0], path[::-1]
    return None


def _in_bf16(x: Instr, moves: list, made: list) -> Instr:
    for mv in moves:
        x = Instr(mv.op, dt.BF16, mv.shape, (x,), dict(mv.attrs), name=f"{mv.name}.bf16",
                  source=mv.source)
        made.append(x)
    return x


def _bf16_product(r: Instr, users: dict, outputs: set) -> list | None:
    if r.op is not Op.CONVERT or r.dtype is not dt.BF16:
        return None
    reader, d, after = r, r.operands[0], []
    while d.op in _MOVES and only_reader(d, reader, users, outputs):
        after.append(d)
        reader, d = d, d.operands[0]
    if d.op not in BF16_CALLS or d.dtype is not dt.F32 or not only_reader(d, reader, users, outputs):
        return None
    sides = [_bf16_source(o) for o in d.operands]
    if None in sides or library_flops(d) < BF16_CALL_FLOPS:
        return None
    made = []
    operands = tuple(_in_bf16(src, moves, made) for src, moves in sides)
    made.append(Instr(d.op, dt.BF16, d.shape, operands, dict(d.attrs), name=f"{d.name}.bf16",
                      source=d.source))
    _in_bf16(made[-1], after[::-1], made)
    made[-1].name = r.name
    return made
