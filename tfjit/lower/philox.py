"""Philox4x32-10 and TF's seed scrambling, built from IR integer ops.

Follows tensorflow/core/lib/random/philox_random.h: a 128-bit counter (four u32
lanes, low first) and a 64-bit key (two u32 lanes) go through ten rounds of
two 32x32->64 multiplications (here u64 multiplies, which LLVM turns into
vpmuludq) and xors, the key growing by the Weyl constants between rounds.
Every output element computes the block it needs on its own, so a random
tensor is an ordinary elementwise computation that fuses with its consumers;
the integer work repeats up to four times per block and vectorises.

Keys are scalars (a seed gives one key for the whole tensor) and stay scalar
until a round xors them into the counters.  ir/interp_rng.py holds the numpy
reference of the same functions.
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.interp_rng import M0, M1, ROUNDS, W0, W1
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower.registry import broadcast_to, scalar_like

U32, U64 = dt.U32, dt.U64
SEED_KEY = (0x3EC8F720, 0x02461E29)      # GenerateKey's fixed key for scrambling a seed


def shr(m: Module, x: Instr, n: int) -> Instr:
    return m.elementwise(Op.SHR_LOGICAL, x, scalar_like(m, n, x))


def shl(m: Module, x: Instr, n: int) -> Instr:
    return m.elementwise(Op.SHL, x, scalar_like(m, n, x))


def mask(m: Module, x: Instr, bits: int) -> Instr:
    return m.elementwise(Op.AND, x, scalar_like(m, bits, x))


def split64(m: Module, x: Instr) -> tuple:
    """(low, high) u32 halves of a u64."""
    return m.convert(x, U32), m.convert(shr(m, x, 32), U32)


def join64(m: Module, lo: Instr, hi: Instr) -> Instr:
    """lo | hi << 32 as a u64."""
    return m.elementwise(Op.OR, m.convert(lo, U64), shl(m, m.convert(hi, U64), 32))


def philox(m: Module, key: tuple, counter: tuple) -> list:
    """The four u32 lanes of Philox4x32-10; ``key`` holds two u32 scalars,
    ``counter`` four u32 values of one shape."""
    k0, k1 = key
    c0, c1, c2, c3 = counter
    shape = c0.shape
    for r in range(ROUNDS):
        if r:
            k0 = m.elementwise(Op.ADD, k0, m.scalar(W0, U32))
            k1 = m.elementwise(Op.ADD, k1, m.scalar(W1, U32))
        p0 = m.elementwise(Op.MUL, scalar_like(m, M0, m.convert(c0, U64)), m.convert(c0, U64))
        p1 = m.elementwise(Op.MUL, scalar_like(m, M1, m.convert(c2, U64)), m.convert(c2, U64))
        lo0, hi0 = split64(m, p0)
        lo1, hi1 = split64(m, p1)
        c0, c1, c2, c3 = (m.elementwise(Op.XOR, m.elementwise(Op.XOR, hi1, c1), broadcast_to(m, k0, shape)),
                          lo1,
                          m.elementwise(Op.XOR, m.elementwise(Op.XOR, hi0, c3), broadcast_to(m, k1, shape)),
                          lo0)
    return [c0, c1, c2, c3]


def add_counter(m: Module, lo: Instr, hi: Instr, n: Instr) -> tuple:
    """The u32 lanes of the 128-bit counter (u64 halves lo, hi, scalars) plus n (u64)."""
    lo, hi = broadcast_to(m, lo, n.shape), broadcast_to(m, hi, n.shape)
    low = m.elementwise(Op.ADD, lo, n)
    carry = m.convert(m.elementwise(Op.LT, low, n), U64)
    high = m.elementwise(Op.ADD, hi, carry)
    return split64(m, low) + split64(m, high)


def key_counter(m: Module, seed: Instr) -> tuple:
    """TF's GenerateKey: the (key u64[1], counter u64[2]) a seed (int32/int64 [2]) gives.

    The seed, sign-extended to two u64, is the counter of one Philox block under a
    fixed key; the block's lanes 0-1 are the new key, lanes 2-3 the counter's high half.
    """
    s0, s1 = (m.convert(m.reshape(m.slice(seed, (k,), (1,)), ()), U64) for k in (0, 1))
    key = tuple(m.scalar(k, U32) for k in SEED_KEY)
    mix = philox(m, key, split64(m, s0) + split64(m, s1))
    key_out = m.reshape(join64(m, mix[0], mix[1]), (1,))
    counter_out = m.concat([m.constant(np.zeros(1, np.uint64), U64),
                            m.reshape(join64(m, mix[2], mix[3]), (1,))], 0)
    return key_out, counter_out


def scalar_key(m: Module, key: Instr) -> tuple:
    """The two u32 lanes of a key u64[1]."""
    return split64(m, m.reshape(m.slice(key, (0,), (1,)), ()))


def scalar_counter(m: Module, counter: Instr) -> tuple:
    """The (low, high) u64 scalars of a counter u64[>= 2]."""
    return tuple(m.reshape(m.slice(counter, (k,), (1,)), ()) for k in (0, 1))
