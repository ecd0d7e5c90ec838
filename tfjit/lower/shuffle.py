"""StatelessShuffle (and so RandomShuffle, graph/random_state.py), bit for bit with TF.

TF's kernel (core/kernels/shuffle_common.h) shuffles the rows of ``value`` (its
first dim, n) by Fisher–Yates: for i = 0 .. n-2 it swaps row i with row
``i + u_i % (n - i)``, u_i being the i-th 32-bit sample of the Philox stream at
(key, counter) (sample i: lane i % 4 of block counter + i // 4), the modulus in
uint32.  A value with at most one element or one row is returned as it is (and
its stateful form reserves nothing); so is a scalar.

The swap targets are elementwise IR (every step's Philox sample at once); the
swaps are sequential, so they are one IR while loop over a permutation of the
row indices (two dynamic slices and two single-element updates in place per
step), then a gather of the rows: shuffling values in place, as TF does for a
vector, and gathering by the shuffled indices give the same result.  IR only, so
every target that runs a while loop runs it (not the GPU target yet: its loops
need a host driver).  Values of more than MAX_ROWS rows are refused: the loop
is slower than TF's kernel there.
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.module import Module
from tfjit.ir.ops import Op
from tfjit.lower import philox as px
from tfjit.lower.random import PHILOX, _choose
from tfjit.lower.registry import ALL, Unsupported, broadcast_to, register

I64, U32, U64 = dt.I64, dt.U32, dt.U64
# The loop's steps run one by one from the host driver (~20 ns each here, 2 cores):
# faster than TF's kernel up to about 16384 rows (0.23 ms against 0.52 at 4096, even
# at 16384), 2.5x slower at 65536 (1.45 ms against 0.57).
MAX_ROWS = 16384


def _step(m: Module, rows: int) -> None:
    """The loop body: params (i, perm, order, js) -> their next values.

    Step i swaps perm[i] and perm[js[i]], js[i] >= i; no later step touches position
    i, so its final value, perm[js[i]], goes straight to ``order`` and perm only gets
    perm[i] at js[i]: each carried array has one single-element update, which the
    buffer assignment makes in place (passes/buffers.py), so a step costs O(1)."""
    i, perm, order, js = (m.parameter(d, s) for d, s in _carried(rows))
    j = m.reshape(m.dynamic_slice(js, [i], [1]), ())
    at_i, at_j = m.dynamic_slice(perm, [i], [1]), m.dynamic_slice(perm, [j], [1])
    m.outputs = [m.elementwise(Op.ADD, i, m.scalar(1, I64)), m.dynamic_update_slice(perm, at_i, [j]),
                 m.dynamic_update_slice(order, at_j, [i]), js]


def _carried(rows: int) -> list:
    return [(I64, ()), (I64, (rows,)), (I64, (rows,)), (I64, (rows,))]


def _targets(m: Module, key, counter, rows: int):
    """js[i] = i + u_i % (rows - i) (uint32) for every step i at once: elementwise IR
    (the samples are lane i % 4 of block counter + i // 4); js[rows - 1] = rows - 1."""
    i = m.iota(U64, (rows,), 0)
    lo, hi = px.scalar_counter(m, counter)
    lanes = px.philox(m, px.scalar_key(m, key), px.add_counter(m, lo, hi, px.shr(m, i, 2)))
    sample = _choose(m, px.mask(m, i, 3), lanes)
    left = m.convert(m.elementwise(Op.SUB, broadcast_to(m, m.scalar(rows, U64), (rows,)), i), U32)
    return m.elementwise(Op.ADD, m.convert(i, I64), m.convert(m.elementwise(Op.REM, sample, left), I64))


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
        raise Unsupported(f"StatelessShuffle of {rows} rows: tfjit's shuffle is a loop of one step "
                          f"per row, slower than TF's kernel beyond {MAX_ROWS} rows")
    m = ctx.m
    name = ctx.functions.computation_name
    cond, body = Module(name(f"{ctx.node.name}.shuffle_cond")), Module(name(f"{ctx.node.name}.shuffle"))
    i = [cond.parameter(d, s) for d, s in _carried(rows)][0]
    cond.outputs = [cond.elementwise(Op.LT, i, cond.scalar(rows - 1, I64))]
    _step(body, rows)
    iota = m.iota(I64, (rows,), 0)
    loop = m.while_loop(cond, body, [m.scalar(0, I64), iota, iota, _targets(m, key, counter, rows)])
    # the last position is never a step's i: it keeps what the steps left at rows - 1
    last = m.dynamic_slice(m.get_tuple_element(loop, 1), [m.scalar(rows - 1, I64)], [1])
    order = m.dynamic_update_slice(m.get_tuple_element(loop, 2), last, [m.scalar(rows - 1, I64)])
    return m.gather(value, order, axis=0)
