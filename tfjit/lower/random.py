"""Lowerings of TF's stateless random ops, bit-identical to TF's CPU kernels.

What TF computes (tensorflow/core/kernels/stateless_random_ops{,_v2}.cc,
random_op_cpu.h, lib/random/random_distributions.h), and how it maps to IR:

* A seed (int32/int64 [2]) becomes a Philox key and counter by one Philox block
  (``StatelessRandomGetKeyCounter``; the V1 ops do the same inline).  That is
  IR arithmetic on the seed (philox.py), folded when the seed is a constant.
* The output is filled in groups, one Philox block per group, block g at
  counter + g: groups of 4 for 32-bit results (uniform floats and ints, normal
  floats) and of 2 for 64-bit ones.  Element i therefore needs block i // group
  and takes its own lanes of it: no state passes between elements, so the
  random tensor is elementwise IR that fuses with whatever consumes it.
* Uniform floats put random mantissa bits under the exponent of 1.0 and
  subtract 1 (f16 takes 10 bits, bf16 7, f32 23, f64 52 of two lanes): exact.
* Uniform ints: ``lo + bits % (hi - lo)`` in unsigned arithmetic (TF's modulo
  method, slightly biased, reproduced as is); 64-bit bits are lane 2k | lane
  2k+1 << 32.
* Normal floats: Box–Muller on lane pairs, with the C library's logf/sinf/cosf
  (log/sin/cos for f64) as TF calls them (the ``-libm`` IR ops), so normals are
  bit-identical too; f16/bf16 round TF's float32 result.
* Truncated normals reject |x| >= 2, so a group consumes a varying number of
  samples; TF gives every group its own window (256 blocks for float groups
  of 4, 128 for double groups of 2) and loops inside it.  That loop is the IR
  op ``truncated-normal`` (codegen/random.py): the elemental emitter has no
  loops of its own, and the rejection loop is the only part that needs one.

Cost: every element recomputes its Philox block (the integer work of up to four
elements; it vectorises) and normals their Box–Muller pair (twice TF's libm
calls, which do not vectorise).  Single-threaded on 2M float32 elements here:
uniform 1.45x TF's time, normal 1.9x, truncated normal 2x, a dropout mask
fused with its consumer 1.07x.  One block per group needs a block-structured
loop in the emitter (or Philox lanes materialised by fusion).

The stateful ops (RandomUniform, RandomStandardNormal, TruncatedNormal,
RandomUniformInt) reach these lowerings as StatelessRandom*V2 nodes whose key and
counter TF's state hands over at run time (graph/random_state.py).

Shapes must be compile-time constants (they are part of the cluster key);
seeds, keys, counters and int bounds are runtime tensors.  ``alg`` must be a
constant: Philox (1), auto-select (3: Philox, TF's CPU choice and XLA's on CPU
and GPU) or THREEFRY (2), which TF's CPU kernels refuse and only its XLA bridge
implements: threefry.py follows that definition.  Key and counter shapes are
checked as TF checks them (key [1]; counter at least 2 long for Philox, 1 for
THREEFRY), with TF's messages.
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower import philox as px
from tfjit.lower import threefry as tfy
from tfjit.lower.philox import U32, U64, mask, shl, shr
from tfjit.lower.registry import FLOATS, Unsupported, broadcast_to, register, scalar_like

INT_DTYPES = (dt.I32, dt.I64)
FULL_INT_DTYPES = (dt.I32, dt.I64, dt.U32, dt.U64)
PHILOX, THREEFRY, AUTO_SELECT = 1, 2, 3
_TRUNCATED_SKIP = {dt.F32: 256, dt.F64: 128}     # Philox blocks reserved per output group


# -- the stream of blocks -----------------------------------------------------------

def _stream(m: Module, key: Instr, counter: Instr, n: int, group: int) -> tuple:
    """(four u32 lanes of element i's block, i % group as u64), both of shape [n]."""
    i = m.iota(U64, (n,), 0)
    lo, hi = px.scalar_counter(m, counter)
    lanes = px.philox(m, px.scalar_key(m, key), px.add_counter(m, lo, hi, shr(m, i, int(math.log2(group)))))
    return lanes, mask(m, i, group - 1)


def _choose(m: Module, pos: Instr, values: list) -> Instr:
    """values[pos] element by element."""
    out = values[-1]
    for k in reversed(range(len(values) - 1)):
        out = m.elementwise(Op.SELECT, m.elementwise(Op.EQ, pos, scalar_like(m, k, pos)), values[k], out)
    return out


def _pairs(m: Module, lanes: list, pos: Instr) -> tuple:
    """(lane 2k, lane 2k+1) for k = pos: the two u32 of a 64-bit value (or of a Box–Muller pair)."""
    return _choose(m, pos, [lanes[0], lanes[2]]), _choose(m, pos, [lanes[1], lanes[3]])


# -- uniform floats and Box–Muller ---------------------------------------------------

def _unit_f32(m: Module, x: Instr, bits: int) -> Instr:
    """[0, 1) from the low ``bits`` bits of x as the top of a float32 mantissa (exact)."""
    man = shl(m, mask(m, x, (1 << bits) - 1), 23 - bits)
    one_and = m.elementwise(Op.OR, man, scalar_like(m, 0x3F800000, man))
    f = m.bitcast(one_and, dt.F32)
    return m.elementwise(Op.SUB, f, scalar_like(m, 1.0, f))


def _unit_f64(m: Module, hi: Instr, lo: Instr) -> Instr:
    """TF's Uint64ToDouble: 20 bits of hi and 32 of lo under the exponent of 1.0, minus 1."""
    man = px.join64(m, lo, mask(m, hi, 0xFFFFF))
    f = m.bitcast(m.elementwise(Op.OR, man, scalar_like(m, 1023 << 52, man)), dt.F64)
    return m.elementwise(Op.SUB, f, scalar_like(m, 1.0, f))


def _box_muller(m: Module, lanes: list, wide: bool) -> tuple:
    """TF's BoxMullerFloat(x0, x1) or BoxMullerDouble(x0..x3): (sin, cos) samples."""
    if wide:
        u1, u = _unit_f64(m, lanes[0], lanes[1]), _unit_f64(m, lanes[2], lanes[3])
        v1 = m.elementwise(Op.MUL, scalar_like(m, 2 * math.pi, u), u)
        eps = scalar_like(m, 1e-7, u1)
    else:
        u1, u = _unit_f32(m, lanes[0], 23), _unit_f32(m, lanes[1], 23)
        # TF writes 2.0f * M_PI * u: a double product, rounded to float
        wide_u = m.convert(u, dt.F64)
        v1 = m.convert(m.elementwise(Op.MUL, scalar_like(m, 2 * math.pi, wide_u), wide_u), dt.F32)
        eps = scalar_like(m, np.float32(1e-7), u1)
    u1 = m.elementwise(Op.SELECT, m.elementwise(Op.LT, u1, eps), eps, u1)
    log = m.elementwise(Op.LOG_LIBM, u1)
    u2 = m.elementwise(Op.SQRT, m.elementwise(Op.MUL, scalar_like(m, -2.0, log), log))
    return (m.elementwise(Op.MUL, m.elementwise(Op.SIN_LIBM, v1), u2),
            m.elementwise(Op.MUL, m.elementwise(Op.COS_LIBM, v1), u2))


def uniform(m: Module, key: Instr, counter: Instr, n: int, dtype: dt.DType) -> Instr:
    if dtype is dt.F64:
        lanes, pos = _stream(m, key, counter, n, 2)
        return _unit_f64(m, *_pairs(m, lanes, pos))
    lanes, pos = _stream(m, key, counter, n, 4)
    bits = {dt.F16: 10, dt.BF16: 7, dt.F32: 23}[dtype]
    return m.convert(_unit_f32(m, _choose(m, pos, lanes), bits), dtype)   # exact for f16/bf16


def normal(m: Module, key: Instr, counter: Instr, n: int, dtype: dt.DType) -> Instr:
    if dtype is dt.F64:
        lanes, pos = _stream(m, key, counter, n, 2)
        sin, cos = _box_muller(m, lanes, wide=True)
        odd = m.elementwise(Op.EQ, pos, scalar_like(m, 1, pos))
    else:
        lanes, pos = _stream(m, key, counter, n, 4)
        sin, cos = _box_muller(m, list(_pairs(m, lanes, shr(m, pos, 1))), wide=False)
        odd = m.elementwise(Op.EQ, mask(m, pos, 1), scalar_like(m, 1, pos))
    return m.convert(m.elementwise(Op.SELECT, odd, cos, sin), dtype)


def truncated_normal(m: Module, key: Instr, counter: Instr, n: int, dtype: dt.DType) -> Instr:
    compute = dt.F64 if dtype is dt.F64 else dt.F32
    group = 2 if compute is dt.F64 else 4
    i = m.iota(U64, (n,), 0)
    window = shl(m, shr(m, i, int(math.log2(group))), int(math.log2(_TRUNCATED_SKIP[compute])))
    lo, hi = px.scalar_counter(m, counter)
    lanes = px.add_counter(m, lo, hi, window)
    k0, k1 = (broadcast_to(m, k, (n,)) for k in px.scalar_key(m, key))
    j = m.convert(mask(m, i, group - 1), U32)
    return m.convert(m.elementwise(Op.TRUNCATED_NORMAL, k0, k1, *lanes, j, dtype=compute), dtype)


# -- integers -------------------------------------------------------------------------

def _bits(m: Module, key: Instr, counter: Instr, n: int, width: int) -> Instr:
    """n random u32 (one lane each) or u64 (lane 2k | lane 2k+1 << 32) values."""
    if width == 32:
        lanes, pos = _stream(m, key, counter, n, 4)
        return _choose(m, pos, lanes)
    lanes, pos = _stream(m, key, counter, n, 2)
    return px.join64(m, *_pairs(m, lanes, pos))


def uniform_full_int(m: Module, key: Instr, counter: Instr, n: int, dtype: dt.DType) -> Instr:
    return m.bitcast(_bits(m, key, counter, n, dtype.bits), dtype)


def uniform_int(m: Module, key: Instr, counter: Instr, n: int, dtype: dt.DType, lo: Instr, hi: Instr) -> Instr:
    return int_in_range(m, _bits(m, key, counter, n, dtype.bits), dtype, lo, hi)


def _threefry_uniform_int(m: Module, key: tuple, counter: Instr, shape: tuple, dtype: dt.DType,
                          lo: Instr, hi: Instr) -> Instr:
    return int_in_range(m, m.bitcast(tfy.full_int(m, key, counter, shape, dtype), U32 if dtype.bits == 32 else U64),
                        dtype, lo, hi)


def int_in_range(m: Module, bits: Instr, dtype: dt.DType, lo: Instr, hi: Instr) -> Instr:
    """lo + bits % (hi - lo) (TF's and XLA's formula alike); hi <= lo makes the modulus 0,
    so the kernel fails at run time ("Integer division by zero", where TF says "Need
    minval < maxval")."""
    unsigned = U32 if dtype.bits == 32 else U64
    width = m.elementwise(Op.SUB, m.convert(hi, unsigned), m.convert(lo, unsigned))
    width = m.elementwise(Op.SELECT, m.elementwise(Op.LT, lo, hi), width, m.scalar(0, unsigned))
    offset = m.elementwise(Op.REM, bits, broadcast_to(m, width, bits.shape))
    return m.bitcast(m.elementwise(Op.ADD, broadcast_to(m, m.convert(lo, unsigned), bits.shape), offset), dtype)


# -- the TF ops -------------------------------------------------------------------------

def _shape_alg(node, value_of) -> tuple:
    """The compile-time inputs: the shape, and a V2 op's alg (after its key and counter)."""
    return (0, 3) if node.op.endswith("V2") else (0,)


def _shape(ctx) -> tuple:
    shape = tuple(ctx.const_ints(0, f"{ctx.node.op}'s shape"))
    if any(d < 0 for d in shape):
        raise Unsupported(f"{ctx.node.op}: negative dimension in shape {list(shape)}")
    return shape


def _key_counter_inputs(ctx, key_at: int) -> tuple:
    """(key, counter, alg) of a V2 op, its alg input (at key_at + 2) resolved
    (auto-select is Philox) and the shapes checked with TF's messages."""
    alg = ctx.const_ints(key_at + 2, "alg")[0]
    if alg == AUTO_SELECT:
        alg = PHILOX
    if alg not in (PHILOX, THREEFRY):
        raise Unsupported(f"Unsupported algorithm id: {alg} (1 is Philox, 2 THREEFRY, 3 auto-select)")
    key, counter = ctx.inputs[key_at], ctx.inputs[key_at + 1]
    if key.shape != (1,):
        raise Unsupported(f"key must have shape [1], not {list(key.shape)}. "
                          f"(Note that batched keys are not supported yet.)")
    need = 2 if alg == PHILOX else 1
    if counter.rank != 1 or counter.shape[0] < need:
        raise Unsupported(f"counter must be a vector with length at least {need}; got shape: "
                          f"{list(counter.shape)}. (Note that batched counters are not supported yet.)")
    return key, counter, alg


def _seed_key_counter(ctx, at: int = 1) -> tuple:
    seed = ctx.inputs[at]
    if seed.shape != (2,):
        raise Unsupported(f"seed must have shape [2], not {list(seed.shape)}")
    return px.key_counter(ctx.m, seed)


def _fill(ctx, shape: tuple, key: Instr, counter: Instr, draw, *extra, alg: int = PHILOX) -> Instr:
    """The op's output: ``draw`` over Philox's flat stream, or over THREEFRY's blocks
    (whose order depends on the shape; ``draw`` is then threefry.py's)."""
    dtype = ctx.attr("dtype").ir
    n = math.prod(shape)
    if n == 0:
        return ctx.m.constant(np.zeros(shape, dtype.numpy()), dtype)
    if alg == THREEFRY:
        return draw(ctx.m, tfy.key_words(ctx.m, key), tfy.counter_word(ctx.m, counter), shape, dtype, *extra)
    return ctx.m.reshape(draw(ctx.m, key, counter, n, dtype, *extra), shape)


def _v2_or_seed(ctx) -> tuple:
    """(key, counter, alg) of a V2 op, or of a V1 op's seed (always Philox)."""
    if ctx.node.op.endswith("V2"):
        return _key_counter_inputs(ctx, 1)
    return _seed_key_counter(ctx) + (PHILOX,)


_FLOAT_DRAWS = {PHILOX: {"Uniform": uniform, "Normal": normal, "TruncatedNormal": truncated_normal},
                THREEFRY: {"Uniform": tfy.uniform, "Normal": tfy.normal, "TruncatedNormal": tfy.truncated_normal}}
_FLOAT_OPS = {"StatelessRandomUniform": "Uniform", "StatelessRandomNormal": "Normal",
              "StatelessTruncatedNormal": "TruncatedNormal"}


@register(*_FLOAT_OPS, *(f"{op}V2" for op in _FLOAT_OPS), dtypes=FLOATS, type_attr="dtype",
          const_inputs=_shape_alg)
def _float_random(ctx):
    v2 = ctx.node.op.endswith("V2")
    key, counter, alg = _v2_or_seed(ctx)
    draw = _FLOAT_DRAWS[alg][_FLOAT_OPS[ctx.node.op[:-2] if v2 else ctx.node.op]]
    return _fill(ctx, _shape(ctx), key, counter, draw, alg=alg)


@register("StatelessRandomUniformFullInt", "StatelessRandomUniformFullIntV2", dtypes=FULL_INT_DTYPES,
          type_attr="dtype", const_inputs=_shape_alg)
def _full_int(ctx):
    key, counter, alg = _v2_or_seed(ctx)
    return _fill(ctx, _shape(ctx), key, counter, tfy.full_int if alg == THREEFRY else uniform_full_int, alg=alg)


@register("StatelessRandomUniformInt", "StatelessRandomUniformIntV2", dtypes=INT_DTYPES, type_attr="dtype",
          const_inputs=_shape_alg)
def _uniform_int(ctx):
    v2 = ctx.node.op.endswith("V2")
    key, counter, alg = _v2_or_seed(ctx)
    lo, hi = ctx.inputs[4:6] if v2 else ctx.inputs[2:4]
    if lo.shape != () or hi.shape != ():
        raise Unsupported(f"minval and maxval must be scalars, not {list(lo.shape)} and {list(hi.shape)}")
    shape = _shape(ctx)
    if lo.op is Op.CONSTANT and hi.op is Op.CONSTANT and math.prod(shape) and not lo.value < hi.value:
        raise Unsupported(f"Need minval < maxval, got {lo.value} >= {hi.value}")
    return _fill(ctx, shape, key, counter, _threefry_uniform_int if alg == THREEFRY else uniform_int, lo, hi,
                 alg=alg)


@register("StatelessRandomGetKeyCounter", dtypes=INT_DTYPES, type_attr="Tseed")
def _get_key_counter(ctx):
    return list(_seed_key_counter(ctx, 0))


@register("StatelessRandomGetKeyCounterAlg", dtypes=INT_DTYPES, type_attr="Tseed")
def _get_key_counter_alg(ctx):
    return list(_seed_key_counter(ctx, 0)) + [ctx.m.scalar(PHILOX, dt.I32)]


@register("StatelessRandomGetAlg")
def _get_alg(ctx):
    return ctx.m.scalar(PHILOX, dt.I32)
