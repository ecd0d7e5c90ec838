"""Simplification passes: common-subexpression elimination, dead-code removal, Mish's
factor as one exp, concatenated copies as broadcasts, and reductions over several
dims of a buffer read as one dim.

Constant folding happens while lowering (``Module.folder``), because lowering
needs folded values (a Reshape's shape computed from Shape/Pack ops).  Each
pass here is ``run(module) -> bool`` (changed or not) and simplifies the module
and every computation it calls (loop bodies, branches) alike.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module, reshaped_source
from tfjit.ir.ops import Kind, Op


def substitute(m: Module, rewrite) -> bool:
    """Replaces each instruction i of ``m`` for which ``rewrite(i)`` returns a list of new
    instructions (operands first) by the last of them, in place and in order; later
    operands and the outputs follow.  Whether anything was replaced."""
    out, replace = [], {}
    for i in m.instrs:
        i.operands = tuple(replace.get(o, o) for o in i.operands)
        made = rewrite(i)
        if made:
            out.extend(made)
            replace[i] = made[-1]
        else:
            out.append(i)
    if not replace:
        return False
    m.instrs = out
    m.outputs = [replace.get(o, o) for o in m.outputs]
    return True


def only_reader(x: Instr, reader: Instr, users: dict, outputs: set) -> bool:
    """Is ``reader`` all that reads ``x`` (no other instruction, not an output)?"""
    return x not in outputs and users[x] == [reader]


class CSE:
    """Replaces an instruction by an identical earlier one (same op, operands, attrs)."""
    name = "cse"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, m: Module) -> bool:
        seen, replace = {}, {}
        for i in m.instrs:
            i.operands = tuple(replace.get(o, o) for o in i.operands)
            if i.op is Op.PARAMETER:
                continue
            value = (i.value.dtype.str, i.value.tobytes()) if i.op is Op.CONSTANT else None
            key = (i.op, i.dtype, i.shape, tuple(id(o) for o in i.operands),
                   tuple(sorted(i.attrs.items())), value)
            if key in seen:
                replace[i] = seen[key]
            else:
                seen[key] = i
        m.outputs = [replace.get(o, o) for o in m.outputs]
        return bool(replace)


class RepeatsAsBroadcasts:
    """A concatenation of copies of one value along a dim it has once is a broadcast
    along that dim.  Strided pools' gradients interleave their window phases this way
    (lower/pooling.py ``scatter_windows``: a non-overlapping average pool's phases are
    one value once CSE has run), and a broadcast is an index map the kernels' read
    analysis follows (passes/iteration.py) where a concatenation picks an operand per
    element: the sum over a 2x2 nearest upsampling of an AvgPool gradient read its
    concatenations as rows of 2 (4.6 ms on [32, 96, 96, 16], graph 3.6)."""
    name = "repeats-as-broadcasts"

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            for i in c.instrs:
                if i.op is Op.CONCAT and len(set(i.operands)) == 1 \
                        and i.operands[0].shape[i.attrs["dim"]] == 1:
                    i.op, i.attrs = Op.BROADCAST, {"dims": tuple(range(i.rank))}
                    i.operands = i.operands[:1]
                    changed = True
        return changed


class ReshapeChains:
    """A reshape of a reshape reads the first one's operand (row-major: the same bytes).
    A pass that replaces a value by a reshape of its own (passes/dots.py's vector
    products) leaves such chains, and a kernel writes a module output in place only
    through one reshape (fusion ``output_views``): through two the output was a copy
    kernel of its own (0.11 ms of rgb_to_grayscale's 0.43 on [32, 224, 224, 3])."""
    name = "reshape-chains"

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            for i in c.instrs:
                if i.op is Op.RESHAPE and i.operands[0].op is Op.RESHAPE:
                    x = i.operands[0]
                    while x.op is Op.RESHAPE:
                        x = x.operands[0]
                    i.operands, changed = (x,), True
        return changed


class ConvertsBeforeReshapes:
    """``convert(reshape(x))`` read only by library calls becomes ``reshape(convert(x))``:
    the call reads the reshape in place (fusion), and the convert's kernel runs in x's
    own shape with whatever fuses into it.  Keras's bf16 Flatten before a Dense too
    small for a bf16 call (passes/dots.py) is a reshape, then the Dense's widening to
    f32 for the f32 product: the kernel that widened the flattened [16, 9216] computed
    UpSampling2D's broadcasts and a 4x4 AvgPool through the collapsed index, 5.3 ms
    against 0.09 for the same pool in f32, where the reshape is the product's operand
    (the layer model layer_upsampling under mixed_bfloat16; docs/performance.md)."""
    name = "converts-before-reshapes"

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            users, outputs = c.live_users(), set(c.outputs)
            out = []
            for i in c.instrs:
                r = i.operands[0] if i.op is Op.CONVERT else None
                if r is not None and r.op is Op.RESHAPE and users[r] == [i] and r not in outputs \
                        and i not in outputs and users[i] \
                        and all(u.op.kind is Kind.LIBRARY for u in users[i]):
                    x = r.operands[0]
                    wide = Instr(Op.CONVERT, i.dtype, x.shape, (x,), name=f"{i.name}.early",
                                 source=i.source)
                    out.append(wide)
                    i.op, i.operands, i.attrs = Op.RESHAPE, (wide,), {}
                    changed = True
                out.append(i)
            c.instrs = out
        return changed


class DCE:
    """Drops instructions no output depends on (parameters always stay)."""
    name = "dce"

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            before = len(c.instrs)
            c.renumber()
            changed |= len(c.instrs) != before
        return changed


class MishFactor:
    """tanh(softplus(x)), the factor of Mish (x * tanh(softplus(x))), as one exp and a
    division: with e = exp(x), tanh(log(1 + e)) = n / (n + 2) for n = e (e + 2); 1 from
    x > 20 (float64: 40), where n + 2 rounds to n and n soon overflows.  Softplus's exp
    and log1p and tanh's expm1 become one exp: Mish on 2048x4096 took 6.2 ms where TF
    graph runs oneDNN's fused Mish in 2.8 (XLA 10.8).  Float32 and float64 only: halves
    round every step, and e (e + 2) overflows float16 from x = 5.5.  Only a softplus
    nothing else reads (otherwise it is computed anyway); DCE then drops it."""
    name = "mish-factor"
    LARGE = {dt.F32: 20.0, dt.F64: 40.0}

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            users, outputs, out = c.users(), set(c.outputs), []
            for i in c.instrs:
                s = i.operands[0] if i.op is Op.TANH and i.dtype in self.LARGE else None
                if s is not None and s.op is Op.SOFTPLUS and users[s] == [i] and s not in outputs:
                    out.extend(self._rewrite(i, s.operands[0]))
                    changed = True
                out.append(i)
            c.instrs = out
        return changed

    def _rewrite(self, i: Instr, x: Instr) -> list:
        """Turns ``i`` into select(x > LARGE, 1, n / (n + 2)); returns the new operands."""
        def scalar(v):
            k = Instr(Op.CONSTANT, x.dtype, (), value=np.asarray(v, x.dtype.numpy()),
                      source=i.source)
            return [k, Instr(Op.BROADCAST, x.dtype, x.shape, (k,), {"dims": ()}, source=i.source)]

        def op(o, *args, dtype=None):
            return Instr(o, dtype or x.dtype, x.shape, args, source=i.source)
        one, two, large = scalar(1.0), scalar(2.0), scalar(self.LARGE[x.dtype])
        e = op(Op.EXP, x)
        e_plus_2 = op(Op.ADD, e, two[1])
        n = op(Op.MUL, e, e_plus_2)
        n_plus_2 = op(Op.ADD, n, two[1])
        ratio = op(Op.DIV, n, n_plus_2)
        big = op(Op.GT, x, large[1], dtype=dt.PRED)
        i.op, i.operands = Op.SELECT, (big, one[1], ratio)
        return one + two + large + [e, e_plus_2, n, n_plus_2, ratio, big]


class FlattenReductions:
    """A reduction over two or more trailing dims of a value in memory (a parameter, a
    loop's result) reads them as one dim: ``reduce(reshape(x, lead + (n,)), ndims=1)``,
    a row-major reshape that moves no data.  Its kernel then takes the 1-D path, chunks of
    contiguous elements, instead of one loop per reduced dim: reduce_sum of a [65536, 64]
    parameter took 2.6 ms that way and takes 1.3 ms flat (XLA: 2.0).  Only values in
    memory: the reshape of an expression would cost its kernel an index division.  An
    elementwise expression of such values (and of scalars) that only the reduction
    reads is rebuilt at the flat shape over reshapes of its leaves: max(exp(x) * .5 + x)
    of a [65536, 64] parameter, reduced row by row, paid a NaN-propagating horizontal
    max every 64 elements (4.3 ms, XLA 2.9)."""
    name = "flatten-reductions"

    def run(self, m: Module) -> bool:
        changed = False
        for c in m.computations() + [m]:
            users, out = c.users(), []
            dead: set = set()
            for i in c.instrs:
                x = i.operands[0] if i.op is Op.REDUCE else None
                n = i.attrs.get("ndims", 0) if x is not None else 0
                chain = _flat_chain(x, i, users, set(c.outputs)) if n >= 2 else None
                if chain is not None:
                    shape = x.shape[:x.rank - n] + (math.prod(x.shape[x.rank - n:]),)
                    made: dict = {}
                    for y in chain:           # operands first
                        made[y] = _flat_copy(y, shape, made, f"{i.name}.flat")
                        out.append(made[y])
                    dead |= {v for v in chain if v.op.kind is Kind.ELEMENTWISE}   # only read here
                    i.operands, i.attrs = (made[x],), {**i.attrs, "ndims": 1}
                    changed = True
                out.append(i)
            c.instrs = [i for i in out if i not in dead]
        return changed


_IN_MEMORY = (Op.PARAMETER, Op.GET_TUPLE_ELEMENT)


def _flat_chain(x: Instr, reduce: Instr, users: dict, outputs: set) -> list | None:
    """x and the elementwise instructions under it, operands first, when its leaves are
    values in memory or scalar broadcasts and nothing outside reads the elementwise ones
    (no other instruction, no output); None otherwise."""
    order, seen, inside = [], set(), {reduce}

    def visit(y) -> bool:
        if y in seen:
            return True
        seen.add(y)
        if _in_memory(y) or (y.op is Op.BROADCAST and y.operands[0].rank == 0):
            order.append(y)
            return True
        if y.op.kind is not Kind.ELEMENTWISE or not all(visit(o) for o in y.operands):
            return False
        order.append(y)
        return True
    if not visit(x):
        return None
    inside |= set(order)
    if any(not _in_memory(y) and y.op is not Op.BROADCAST
           and (y in outputs or not set(users[y]) <= inside) for y in order):
        return None
    return order


def _in_memory(y: Instr) -> bool:
    """A parameter or a while's result, or a reshape of one (passes/collapse.py's)."""
    return reshaped_source(y).op in _IN_MEMORY


def _flat_copy(y: Instr, shape: tuple, made: dict, name: str) -> Instr:
    if _in_memory(y):             # a row-major reshape: no data moves
        y = reshaped_source(y)
        return Instr(Op.RESHAPE, y.dtype, shape, (y,), name=f"{name}.{y.name}", source=y.source)
    if y.op is Op.BROADCAST:
        return Instr(Op.BROADCAST, y.dtype, shape, y.operands, {"dims": ()},
                     name=f"{name}.{y.name}", source=y.source)
    return dataclasses.replace(y, shape=shape, operands=tuple(made[o] for o in y.operands),
                               name=f"{name}.{y.name}")
