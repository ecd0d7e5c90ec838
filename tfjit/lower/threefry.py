"""The stateless random ops' THREEFRY algorithm (alg 2), as TF's XLA bridge defines it.

TF's own CPU kernels refuse alg 2 ("Unsupported algorithm id: 2"); only XLA
implements it (tf2xla/kernels/stateless_random_ops_v2.cc and random_ops_util.cc
over xla/hlo/builder/lib/prng.cc), so XLA's construction is the definition
followed here, checked against ``tf.function(jit_compile=True)``:

* Key u64[1] and counter u64[>= 1]: only counter[0] is used.  The key's low
  and high halves are the two ThreeFry-2x32 (20 rounds) key words; a 64-bit
  block counter c is the input pair (low, high), and a block yields two u32.
* 64-bit outputs: element i (row-major) is block ``counter + i``, word 0 |
  word 1 << 32.
* 32-bit (and narrower) outputs: XLA halves the shape on one dimension
  (``split_dim``: the first even one, else the first largest), numbers the
  blocks row-major over the halved shape, and gives element j of the split
  dimension word j % 2 of the block at j // 2.  f16 takes the low 16 bits.
* Uniform floats: f16 puts 10 bits under the exponent of 1.0 and subtracts 1;
  f32 (f64) converts bits >> 9 (>> 12) and scales by 2^-23 (2^-52); bf16 is
  the f32 value with its low 16 bits cleared (truncation, not rounding).
* Normals: Box–Muller on a uniform tensor of the "concat shape" (the split
  dimension halved and a dimension of 2 after it), the sine where j is even,
  the cosine where odd; f16 computes in f16, bf16 in f32 then truncates.
* Truncated normals: the inverse CDF, sqrt(2) * erfinv(2p - 1) with XLA's
  ErfInv polynomials (Giles), p uniform on the truncated CDF range.

Integer results and uniforms are XLA's bits exactly.  Normals and truncated
normals call the C library's log/sin/cos (and tfjit's log1p) and round every
multiply and add (f16 to f16 after each op, as XLA's f16 arithmetic does):
XLA's CPU code vectorises an f32 log of its own and lets LLVM fuse
multiply-adds where the host has FMA, so XLA's own last bits change with the
tensor's size and the CPU, while tfjit's are the same on every x86-64.
Measured against XLA (tests/test_threefry.py): f16, bf16 and f64 normals and
f16/bf16 truncated normals bit-exact, f32 normals within 2 ulp, f32/f64
truncated normals within 2e-6/4e-15 (up to 81 ulp near 0, where 2p - 1
cancels an FMA's extra bits).

Cost: each element computes its own ThreeFry block (twice for normals, which
need two uniforms); nothing is shared between the two words of a block.
"""
from __future__ import annotations

import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower.halfmath import Arith
from tfjit.lower.philox import U32, U64, join64, mask, shl, shr, split64
from tfjit.lower.registry import scalar_like

ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
PARITY = 0x1BD11BDA


# -- ThreeFry-2x32 --------------------------------------------------------------------

def threefry2x32(m: Module, key: tuple, x: tuple) -> tuple:
    """XLA's ThreeFry2x32 (20 rounds): two u32 words from ``x`` (two u32 of one
    shape) under ``key`` (two u32 scalars)."""
    k0, k1 = key
    ks = (k0, k1, m.elementwise(Op.XOR, m.elementwise(Op.XOR, k0, m.scalar(PARITY, U32)), k1))
    shape = x[0].shape

    def add_key(v, k, extra=0):
        kk = ks[k] if not extra else m.elementwise(Op.ADD, ks[k], m.scalar(extra, U32))
        return m.elementwise(Op.ADD, v, m.broadcast(kk, shape, ()))

    x0, x1 = add_key(x[0], 0), add_key(x[1], 1)
    for group in range(5):
        for r in ROTATIONS[4 * (group % 2):4 * (group % 2) + 4]:
            x0 = m.elementwise(Op.ADD, x0, x1)
            x1 = m.elementwise(Op.OR, shl(m, x1, r), shr(m, x1, 32 - r))
            x1 = m.elementwise(Op.XOR, x0, x1)
        # ks[1] + ks[2] + 1 in XLA's order: (x1 + ks) + n is (x1 + (ks + n)) mod 2^32
        x0, x1 = add_key(x0, (group + 1) % 3), add_key(x1, (group + 2) % 3, group + 1)
    return x0, x1


# -- which block and word an element takes ---------------------------------------------

def split_dim(shape: tuple) -> int | None:
    """XLA's SplitShapeIntoHalves: the first even dimension, else the first largest;
    None for a scalar (which XLA treats as [1] halved from [2])."""
    if not shape:
        return None
    even = [d for d, n in enumerate(shape) if n % 2 == 0]
    return even[0] if even else max(range(len(shape)), key=lambda d: (shape[d], -d))


def _linear(m: Module, idx: list, shape: tuple) -> Instr:
    """Row-major linear index (u64) of the multi-index ``idx`` (u64 tensors) into ``shape``."""
    out, stride = None, 1
    for d in reversed(range(len(shape))):
        if shape[d] > 1:
            term = idx[d] if stride == 1 else m.elementwise(Op.MUL, idx[d], scalar_like(m, stride, idx[d]))
            out = term if out is None else m.elementwise(Op.ADD, out, term)
        stride *= shape[d]
    return out


def _blocks(m: Module, key: tuple, counter: Instr, offset: Instr | None, like: Instr) -> tuple:
    """The two words of block ``counter + offset`` (u64 scalar plus u64 tensor)."""
    c = m.broadcast(counter, like.shape, ())
    if offset is not None:
        c = m.elementwise(Op.ADD, c, offset)
    return threefry2x32(m, key, split64(m, c))


def bits32_at(m: Module, key: tuple, counter: Instr, shape: tuple, idx: list, like: Instr) -> Instr:
    """u32 bits of XLA's ThreeFryRngBit32 over ``shape`` at multi-index ``idx``;
    ``like`` gives the result's shape (a scalar shape has an empty idx)."""
    sd = split_dim(shape)
    if sd is None:
        return _blocks(m, key, counter, None, like)[0]
    half = shape[:sd] + ((shape[sd] + 1) // 2,) + shape[sd + 1:]
    hidx = idx[:sd] + [shr(m, idx[sd], 1)] + idx[sd + 1:]
    y0, y1 = _blocks(m, key, counter, _linear(m, hidx, half), like)
    odd = m.elementwise(Op.EQ, mask(m, idx[sd], 1), scalar_like(m, 1, idx[sd]))
    return m.elementwise(Op.SELECT, odd, y1, y0)


def bits64_at(m: Module, key: tuple, counter: Instr, shape: tuple, idx: list, like: Instr) -> Instr:
    """u64 bits of XLA's ThreeFryRngBit64: block counter + linear index, word 0 low."""
    y0, y1 = _blocks(m, key, counter, _linear(m, idx, shape) if shape else None, like)
    return join64(m, y0, y1)


def _iotas(m: Module, shape: tuple) -> list:
    return [m.iota(U64, shape, d) for d in range(len(shape))]


def _like(m: Module, shape: tuple) -> Instr:
    return m.iota(U64, shape, 0) if shape else m.scalar(0, U64)


# -- uniforms ---------------------------------------------------------------------------

def _unit_at(m: Module, key, counter, shape: tuple, idx: list, like: Instr, dtype: dt.DType) -> Instr:
    """XLA's ConvertRandomBitsToUniformFloatingPoint for [0, 1) (f16, f32 or f64), in
    the compute type (f16's exact value in f32)."""
    if dtype is dt.F64:
        f = m.convert(shr(m, bits64_at(m, key, counter, shape, idx, like), 12), dt.F64)
        return m.elementwise(Op.MUL, f, scalar_like(m, 2.0 ** -52, f))
    bits = bits32_at(m, key, counter, shape, idx, like)
    if dtype is dt.F16:
        one_and = m.elementwise(Op.OR, mask(m, bits, 0x3FF), scalar_like(m, 15 << 10, bits))
        h = m.convert(m.bitcast(m.convert(one_and, dt.U16), dt.F16), dt.F32)
        return m.elementwise(Op.SUB, h, scalar_like(m, 1.0, h))        # exact
    f = m.convert(shr(m, bits, 9), dt.F32)
    return m.elementwise(Op.MUL, f, scalar_like(m, 2.0 ** -23, f))


def _truncate_bf16(m: Module, x: Instr) -> Instr:
    """tf2xla's MaybeConvertF32ToBF16: the f32's low 16 bits cleared (exact in bf16)."""
    return m.convert(m.bitcast(mask(m, m.bitcast(x, U32), 0xFFFF0000), dt.F32), dt.BF16)


def _store(m: Module, x: Instr, dtype: dt.DType) -> Instr:
    """The compute-type result as ``dtype`` (exact for f16, truncating for bf16)."""
    return _truncate_bf16(m, x) if dtype is dt.BF16 else m.convert(x, dtype)


def uniform(m: Module, key: tuple, counter: Instr, shape: tuple, dtype: dt.DType) -> Instr:
    compute = dt.F32 if dtype is dt.BF16 else dtype
    return _store(m, _unit_at(m, key, counter, shape, _iotas(m, shape), _like(m, shape), compute), dtype)


def full_int(m: Module, key: tuple, counter: Instr, shape: tuple, dtype: dt.DType) -> Instr:
    at = bits64_at if dtype.bits == 64 else bits32_at
    return m.bitcast(at(m, key, counter, shape, _iotas(m, shape), _like(m, shape)), dtype)


# -- normals ------------------------------------------------------------------------------

def _box_muller(ar: Arith, x0: Instr, x1: Instr) -> tuple:
    """XLA's BoxMullerTransform in ar's type: (sin, cos) samples.  f16 rounds every
    result to f16 and calls the f32 functions (XLA upcasts f16 transcendentals)."""
    m = ar.m
    u1 = ar.op(Op.MAX, x0, ar.like(float(np.float32(1e-7)), x0))       # XLA writes 1.0e-7f
    v1 = ar.op(Op.MUL, ar.like(2.0 * math.pi, x1), x1)
    log = ar.round(m.elementwise(Op.LOG_LIBM, u1))
    u2 = ar.op(Op.SQRT, ar.op(Op.MUL, ar.like(-2.0, log), log))
    return (ar.op(Op.MUL, ar.round(m.elementwise(Op.SIN_LIBM, v1)), u2),
            ar.op(Op.MUL, ar.round(m.elementwise(Op.COS_LIBM, v1)), u2))


def normal(m: Module, key: tuple, counter: Instr, shape: tuple, dtype: dt.DType) -> Instr:
    """XLA's NormalFloatingPointDistribution: uniforms of the concat shape, Box–Muller
    on its two halves, put back along the split dimension."""
    compute = dt.F32 if dtype is dt.BF16 else dtype
    sd = split_dim(shape)
    like = _like(m, shape)
    if sd is None:
        halves = [[m.scalar(k, U64)] for k in (0, 1)]
        concat = (2,)
    else:
        idx = _iotas(m, shape)
        concat = shape[:sd] + ((shape[sd] + 1) // 2, 2) + shape[sd + 1:]
        halves = [idx[:sd] + [shr(m, idx[sd], 1), scalar_like(m, k, like)] + idx[sd + 1:] for k in (0, 1)]
    x0, x1 = (_unit_at(m, key, counter, concat, h, like, compute) for h in halves)
    sin, cos = _box_muller(Arith(m, compute), x0, x1)
    if sd is None:
        out = sin
    else:
        odd = m.elementwise(Op.EQ, mask(m, idx[sd], 1), scalar_like(m, 1, like))
        out = m.elementwise(Op.SELECT, odd, cos, sin)
    return _store(m, out, dtype)


# -- truncated normals ----------------------------------------------------------------------

# XLA's ErfInv coefficients (Giles), highest power first
_ERFINV32 = {  # w < 5, w >= 5
    True: (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
           -0.00417768164, 0.246640727, 1.50140941),
    False: (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
            0.00943887047, 1.00167406, 2.83297682)}
_ERFINV64_LT_6_25 = (
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18, 1.115787767802518096e-17,
    -1.333171662854620906e-16, 2.0972767875968561637e-17, 6.6376381343583238325e-15, -4.0545662729752068639e-14,
    -8.1519341976054721522e-14, 2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08, 4.2347877827932403518e-07,
    -1.3654692000834678645e-06, -1.3882523362786468719e-05, 0.0001867342080340571352, -0.00074070253416626697512,
    -0.0060336708714301490533, 0.24015818242558961693, 1.6536545626831027356)
_ERFINV64_LT_16 = (
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07, 1.8239629214389227755e-08,
    1.5027403968909827627e-06, -4.013867526981545969e-06, 2.9234449089955446044e-06, 1.2475304481671778723e-05,
    -4.7318229009055733981e-05, 6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066, -0.0037512085075692412107,
    0.005370914553590063617, 1.0052589676941592334, 3.0838856104922207635)
_ERFINV64_GE_16 = (
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09, -3.7894654401267369937e-09,
    7.6157012080783393804e-09, -1.4960026627149240478e-08, 2.9147953450901080826e-08, -6.7711997758452339498e-08,
    2.2900482228026654717e-07, -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
    7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026, 1.0103004648645343977,
    4.8499064014085844221)


def _select_const(m: Module, pred: Instr, a: float, b: float, like: Instr) -> Instr:
    return m.elementwise(Op.SELECT, pred, scalar_like(m, a, like), scalar_like(m, b, like))


def _horner_step(m: Module, p: Instr, w: Instr, c: Instr) -> Instr:
    return m.elementwise(Op.ADD, c, m.elementwise(Op.MUL, p, w))


def erfinv(m: Module, x: Instr) -> Instr:
    """XLA's ErfInv32 (f32) or ErfInv64 (f64) for |x| < 1 (the callers clamp x, so
    XLA's |x| == 1 case, x * max, is left out)."""
    w = m.elementwise(Op.NEG, m.elementwise(Op.LOG1P, m.elementwise(Op.NEG, m.elementwise(Op.MUL, x, x))))
    c = lambda v: scalar_like(m, v, x)
    if x.dtype is dt.F32:
        lt = m.elementwise(Op.LT, w, c(5.0))
        w = m.elementwise(Op.SELECT, lt, m.elementwise(Op.SUB, w, c(2.5)),
                          m.elementwise(Op.SUB, m.elementwise(Op.SQRT, w), c(3.0)))
        coef = [_select_const(m, lt, a, b, x) for a, b in zip(_ERFINV32[True], _ERFINV32[False])]
        p = coef[0]
        for k in coef[1:]:
            p = _horner_step(m, p, w, k)
        return m.elementwise(Op.MUL, p, x)
    lt625, lt16 = m.elementwise(Op.LT, w, c(6.25)), m.elementwise(Op.LT, w, c(16.0))

    def coef(i):
        k = c(_ERFINV64_LT_6_25[i])
        if i < 19:
            k = m.elementwise(Op.SELECT, lt625, k, c(_ERFINV64_LT_16[i]))
        if i < 17:
            k = m.elementwise(Op.SELECT, lt16, k, c(_ERFINV64_GE_16[i]))
        return k
    shift = m.elementwise(Op.SUB, m.elementwise(Op.SQRT, w), _select_const(m, lt16, 3.25, 5.0, x))
    w = m.elementwise(Op.SELECT, lt625, m.elementwise(Op.SUB, w, c(3.125)), shift)
    p = coef(0)
    for i in range(1, 23):
        step = _horner_step(m, p, w, coef(i))
        p = step if i < 17 else m.elementwise(Op.SELECT, lt16 if i < 19 else lt625, step, p)
    return m.elementwise(Op.MUL, p, x)


def _cdf_bounds(dtype: dt.DType) -> tuple:
    """(Phi(-2), Phi(2)) as XLA's constant folding computes (1 + erf(+-2 / sqrt 2)) / 2 in
    ``dtype``; f16 and f32 call erf in f32 (f16 upcasts), here the double erf rounded."""
    t = dtype.numpy().type
    s2 = t(math.sqrt(2.0))
    out = []
    for bound in (-2.0, 2.0):
        arg = t(t(bound) / s2)
        e = t(np.float32(math.erf(float(arg)))) if dtype is not dt.F64 else math.erf(float(arg))
        out.append(float(t(t(t(1.0) + t(e)) / t(2.0))))
    return tuple(out)


def truncated_normal(m: Module, key: tuple, counter: Instr, shape: tuple, dtype: dt.DType) -> Instr:
    """tf2xla's TruncatedNormal (mu 0, sigma 1, bounds +-2) over XLA's uniforms on
    [smallest normal, 1); f16 uniforms come from the f16 path, which ignores the bounds."""
    compute = dt.F32 if dtype is dt.BF16 else dtype
    ar = Arith(m, compute)
    u = _unit_at(m, key, counter, shape, _iotas(m, shape), _like(m, shape), compute)
    t = compute.numpy().type
    if compute is not dt.F16:
        tiny = float(np.finfo(t).tiny)
        u = ar.op(Op.ADD, ar.op(Op.MUL, u, ar.like(float(t(1.0) - t(tiny)), u)), ar.like(tiny, u))
    lo_cdf, hi_cdf = _cdf_bounds(compute)
    p = ar.op(Op.ADD, ar.like(lo_cdf, u), ar.op(Op.MUL, ar.like(float(t(hi_cdf) - t(lo_cdf)), u), u))
    v = ar.op(Op.SUB, ar.op(Op.MUL, ar.like(2.0, p), p), ar.like(1.0, p))
    eps = float(np.finfo(t).eps)
    v = ar.op(Op.MIN, ar.op(Op.MAX, v, ar.like(-1.0 + eps, v)), ar.like(1.0 - eps, v))
    inv = ar.round(erfinv(m, v))           # f16: XLA's ErfInv upcasts to f32
    x = ar.op(Op.ADD, ar.like(0.0, inv), ar.op(Op.MUL, ar.like(math.sqrt(2.0), inv), inv))
    x = ar.op(Op.MIN, ar.op(Op.MAX, x, ar.like(-2.0, x)), ar.like(2.0, x))
    return _store(m, x, dtype)


# -- key and counter ---------------------------------------------------------------------

def key_words(m: Module, key: Instr) -> tuple:
    """The two u32 key words (low, high) of a key u64[1]."""
    return split64(m, m.reshape(m.slice(key, (0,), (1,)), ()))


def counter_word(m: Module, counter: Instr) -> Instr:
    """counter[0] as a u64 scalar (XLA slices a longer counter to its first element)."""
    return m.reshape(m.slice(counter, (0,), (1,)), ())
