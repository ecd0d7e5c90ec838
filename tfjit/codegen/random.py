"""LLVM for the truncated-normal IR op: TF's rejection loop over Philox4x32-10.

TF's TruncatedNormalDistribution draws Box–Muller pairs until it has kept as
many values with |x| < 2 as its group holds; how many pairs that takes varies,
so the op is a loop (a few iterations on average; TF's own loop is unbounded,
and so is this one: it ends exactly when TF's does).  One output element runs
the loop of its group up to its own sample ``j``: float32 trial t reads the u32
pair (2(t%2), 2(t%2)+1) of Philox block counter + t//2, float64 trial t the four
lanes of block counter + t (tensorflow/core/kernels/random_op_cpu.h,
random_distributions.h).  The numpy reference is ir/interp_rng.py.

``libm(name, x)`` emits the C library call (logf/log, sinf/sin, cosf/cos):
TF's kernels call those, and tfjit's vectorised mathlib differs in the last bit.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from tfjit.codegen.llvm_types import F32, F64, I1, I32, I64, intrinsic
from tfjit.ir.interp_rng import M0, M1, ROUNDS, TRUNCATE, W0, W1


def _u32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def philox(b: ir.IRBuilder, key: tuple, counter: tuple) -> list:
    """The four u32 lanes of Philox4x32-10 for one counter (i32 values)."""
    k0, k1 = key
    c0, c1, c2, c3 = counter
    wide = ir.Constant(I64, 32)
    for r in range(ROUNDS):
        if r:
            k0, k1 = b.add(k0, _u32(W0)), b.add(k1, _u32(W1))
        p0 = b.mul(ir.Constant(I64, M0), b.zext(c0, I64))
        p1 = b.mul(ir.Constant(I64, M1), b.zext(c2, I64))
        c0, c1, c2, c3 = (b.xor(b.xor(b.trunc(b.lshr(p1, wide), I32), c1), k0), b.trunc(p1, I32),
                          b.xor(b.xor(b.trunc(b.lshr(p0, wide), I32), c3), k1), b.trunc(p0, I32))
    return [c0, c1, c2, c3]


def add_counter(b: ir.IRBuilder, counter: tuple, n) -> tuple:
    """The 128-bit counter (u32 lanes, low first) plus the i64 value n."""
    c0, c1, c2, c3 = (b.zext(c, I64) for c in counter)
    wide = ir.Constant(I64, 32)
    lo = b.add(b.or_(c0, b.shl(c1, wide)), n)
    hi = b.add(b.or_(c2, b.shl(c3, wide)), b.zext(b.icmp_unsigned("<", lo, n), I64))
    return tuple(b.trunc(v, I32) for v in (lo, b.lshr(lo, wide), hi, b.lshr(hi, wide)))


def _uniform_f32(b, x):
    bits = b.or_(b.and_(x, _u32(0x7FFFFF)), _u32(0x3F800000))
    return b.fsub(b.bitcast(bits, F32), ir.Constant(F32, 1.0))


def _uniform_f64(b, hi, lo):
    man = b.or_(b.shl(b.zext(b.and_(hi, _u32(0xFFFFF)), I64), ir.Constant(I64, 32)), b.zext(lo, I64))
    bits = b.or_(man, ir.Constant(I64, 1023 << 52))
    return b.fsub(b.bitcast(bits, F64), ir.Constant(F64, 1.0))


def box_muller(b: ir.IRBuilder, lanes: list, wide: bool, libm) -> tuple:
    """TF's BoxMullerFloat (lanes x0, x1) or BoxMullerDouble (x0..x3): (sin, cos) samples."""
    if wide:
        t = F64
        u1, u = _uniform_f64(b, lanes[0], lanes[1]), _uniform_f64(b, lanes[2], lanes[3])
        v1 = b.fmul(ir.Constant(F64, 2 * math.pi), u)
    else:
        t = F32
        u1, u = _uniform_f32(b, lanes[0]), _uniform_f32(b, lanes[1])
        # TF writes 2.0f * M_PI * u: a double product, rounded to float
        v1 = b.fptrunc(b.fmul(ir.Constant(F64, 2 * math.pi), b.fpext(u, F64)), F32)
    eps = ir.Constant(t, 1e-7 if wide else float(np.float32(1e-7)))
    u1 = b.select(b.fcmp_ordered("<", u1, eps), eps, u1)
    u2 = intrinsic(b, "sqrt", t, [b.fmul(ir.Constant(t, -2.0), libm("log", u1))])
    return b.fmul(libm("sin", v1), u2), b.fmul(libm("cos", v1), u2)


def truncated_normal(b: ir.IRBuilder, out: ir.Type, args: list, libm):
    """The loop of ``Op.TRUNCATED_NORMAL``; ends in a new block, returns the sample."""
    k0, k1, c0, c1, c2, c3, j = args
    wide = out == F64
    pre = b.block
    loop, done = b.append_basic_block("tn.trial"), b.append_basic_block("tn.done")
    b.branch(loop)
    b.position_at_end(loop)
    trial = b.phi(I64, name="tn.t")
    count = b.phi(I32, name="tn.kept")
    trial.add_incoming(ir.Constant(I64, 0), pre)
    count.add_incoming(_u32(0), pre)
    step = trial if wide else b.lshr(trial, ir.Constant(I64, 1))
    lanes = philox(b, (k0, k1), add_counter(b, (c0, c1, c2, c3), step))
    if not wide:
        odd = b.trunc(trial, I1)
        lanes = [b.select(odd, lanes[2], lanes[0]), b.select(odd, lanes[3], lanes[1])]
    found, value, kept = ir.Constant(I1, 0), None, count
    for sample in box_muller(b, lanes, wide, libm):
        ok = b.fcmp_ordered("<", intrinsic(b, "fabs", out, [sample]), ir.Constant(out, TRUNCATE))
        take = b.and_(b.and_(ok, b.icmp_unsigned("==", kept, j)), b.not_(found))
        value = sample if value is None else b.select(take, sample, value)
        found = b.or_(found, take)
        kept = b.add(kept, b.zext(ok, I32))
    trial.add_incoming(b.add(trial, ir.Constant(I64, 1)), b.block)
    count.add_incoming(kept, b.block)
    b.cbranch(found, done, loop)
    b.position_at_end(done)
    return value
