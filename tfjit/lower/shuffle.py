"""StatelessShuffle (and so RandomShuffle, graph/random_state.py), bit for bit with TF.

TF's kernel (core/kernels/shuffle_common.h) shuffles the rows of ``value`` (its
first dim, n) by Fisher–Yates: for i = 0 .. n-2 it swaps row i with row
``i + u_i % (n - i)``, u_i being the i-th 32-bit sample of the Philox stream at
(key, counter) (sample i: lane i % 4 of block counter + i // 4), the modulus in
uint32.  A value with at most one element or one row is returned as it is (and
its stateful form reserves nothing); so is a scalar.

The swaps are sequential, so this is one IR while loop over a permutation of
the row indices (Philox block, two dynamic slices and two dynamic updates per
step), then a gather of the rows: shuffling values in place, as TF does for a
vector, and gathering by the shuffled indices give the same result.  IR only, so
every target that runs a while loop runs it (not the GPU target yet: its loops
need a host driver).  Values of more than MAX_ROWS rows are refused: the loop's
permutation is copied at every step.
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.module import Module
from tfjit.ir.ops import Op
from tfjit.lower import philox as px
from tfjit.lower.random import PHILOX, _choose
from tfjit.lower.registry import ALL, Unsupported, register

I64, U32, U64 = dt.I64, dt.U32, dt.U64
# Each step of the loop copies the permutation (its dynamic updates are not in place),
# so the loop costs rows^2: measured here (2 cores) it matches TF's kernel at 1000 rows
# (0.25 ms), is 2.6x slower at 4096 rows of 256 floats and 2300x slower at 100000.
MAX_ROWS = 1024


def _step(m: Module, rows: int) -> None:
    """The loop body: params (i, perm, lo, hi, k0, k1) -> their next values."""
    i, perm, lo, hi, k0, k1 = (m.parameter(d, s) for d, s in _carried(rows))
    block = px.shr(m, m.convert(i, U64), 2)
    lanes = px.philox(m, (k0, k1), px.add_counter(m, lo, hi, block))
    sample = _choose(m, px.mask(m, m.convert(i, U64), 3), lanes)
    left = m.convert(m.elementwise(Op.SUB, m.scalar(rows, I64), i), U32)
    j = m.elementwise(Op.ADD, i, m.convert(m.elementwise(Op.REM, sample, left), I64))
    at_i, at_j = m.dynamic_slice(perm, [i], [1]), m.dynamic_slice(perm, [j], [1])
    perm = m.dynamic_update_slice(m.dynamic_update_slice(perm, at_j, [i]), at_i, [j])
    m.outputs = [m.elementwise(Op.ADD, i, m.scalar(1, I64)), perm, lo, hi, k0, k1]


def _carried(rows: int) -> list:
    return [(I64, ()), (I64, (rows,)), (U64, ()), (U64, ()), (U32, ()), (U32, ())]


@register("StatelessShuffle", dtypes=ALL, type_attr="T", const_inputs=(3,))
def _stateless_shuffle(ctx):
    from tfjit.lower.random import _key_counter_inputs
    value = ctx.inputs[0]
    key, counter, alg = _key_counter_inputs(ctx, 1)
    if alg != PHILOX:
        raise Unsupported("StatelessShuffle: only the Philox algorithm is supported (TF's CPU kernel "
                          "refuses the others too)")
    if value.size <= 1 or value.shape[0] <= 1:     # a scalar too, as TF's kernel
        return value
    rows = value.shape[0]
    if rows > MAX_ROWS:
        raise Unsupported(f"StatelessShuffle of {rows} rows: tfjit's shuffle loop costs rows^2 "
                          f"(its permutation is copied at every step), slower than TF's kernel "
                          f"beyond {MAX_ROWS} rows")
    m = ctx.m
    name = ctx.functions.computation_name
    cond, body = Module(name(f"{ctx.node.name}.shuffle_cond")), Module(name(f"{ctx.node.name}.shuffle"))
    i = [cond.parameter(d, s) for d, s in _carried(rows)][0]
    cond.outputs = [cond.elementwise(Op.LT, i, cond.scalar(rows - 1, I64))]
    _step(body, rows)
    lo, hi = px.scalar_counter(m, counter)
    k0, k1 = px.scalar_key(m, key)
    loop = m.while_loop(cond, body, [m.scalar(0, I64), m.iota(I64, (rows,), 0), lo, hi, k0, k1])
    return m.gather(value, m.get_tuple_element(loop, 1), axis=0)
