"""Random TF programs for tests/test_random_graphs.py: the program, its TF builder, error bounds.

A ``Program`` is a DAG of ops over 1-3 inputs, generated (random_graph_generator.py)
from one seeded ``numpy.random.Generator``, so (seed, index) replays it exactly.  ``build``
turns it into a plain Python function of TF ops (traced once by tf.function for
the oracle and once by tfjit.function); ``describe`` prints it as readable
pseudo-code for failure messages.

Tolerances (``error_bounds``)
----------------------------
tfjit and TF agree bit for bit on correctly rounded ops (add, sub, mul,
max, min, movement, casts ...) given identical inputs.  They legitimately
differ where an op is not correctly rounded or is reassociated: exp, tanh,
sigmoid (different approximations, up to ``ULPS_TRANSCENDENTAL`` ulps), and
float sum/mean/softmax (different summation order: each order's error is at
most (n-1)·u·Σ|x|, so the two differ by at most 2n·u·Σ|x| where u is the
unit roundoff of the dtype and Σ|x| the sum of magnitudes of the reduced
elements).  ``error_bounds`` runs the program eagerly in TF and propagates a
per-element bound on |tfjit - TF| through every op by first-order rules
(e.g. mul: ea·|b| + eb·|a| + ea·eb; exp: r·expm1(ea); sum: Σea + 2n·u·Σ|x|),
computed in float64 from the actual input values.  The test's atol per element
is ``SAFETY`` times that bound (never less than the oracle's default atol), so
cancellation after a sum (x - reduce_mean(x)) is covered by the data-derived
scale instead of a loose global tolerance.

Discontinuous ops (comparisons feeding select, float->int casts) are only
applied to values that are *exact* (computed by correctly rounded ops only),
so an allowed difference can never flip a branch.  Static magnitude bounds
(random_graph_generator.py) keep floats finite and int32 free of overflow.

Signed zeros: the oracle compares the sign of zero results, except for values
downstream of maximum/minimum/relu/reduce_max/reduce_min/softmax
(``Value.zero_sign``): on a +0.0/-0.0 tie TF itself returns the right operand
in Eigen's vectorised loop and the left one in its scalar tail (so its answer
depends on the element's position), which no compiler can reproduce.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow as tf

CLIP = 4.0                  # exp's argument is clipped to [-CLIP, CLIP]
ULPS_TRANSCENDENTAL = 8     # allowed implementation difference of exp/tanh/sigmoid, in ulps
SAFETY = 4.0                # atol = SAFETY * propagated bound
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}
FLOATS = ("float32", "float64")


@dataclasses.dataclass
class Value:
    id: int
    dtype: str            # "float32" | "float64" | "int32"
    shape: tuple
    bound: float          # static upper bound of |x|
    exact: bool           # computed by correctly rounded ops only: TF and tfjit agree bitwise
    uses: int = 0
    zero_sign: bool = True  # the sign of a zero result is well defined (see SIGNED_ZERO_UNSTABLE)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclasses.dataclass
class Node:
    op: str
    args: tuple           # Value ids
    attrs: dict
    out: Value


@dataclasses.dataclass
class Program:
    inputs: list
    nodes: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)

    @property
    def values(self) -> list:
        return self.inputs + [n.out for n in self.nodes]

    def describe(self) -> str:
        lines = ["inputs: " + ", ".join(f"v{v.id}: {v}" for v in self.inputs)]
        for n in self.nodes:
            if n.op == "where":
                rhs = f"v{n.args[3]}" if len(n.args) > 3 else repr(n.attrs["threshold"])
                call = f"where({n.attrs['cmp']}(v{n.args[2]}, {rhs}), v{n.args[0]}, v{n.args[1]})"
            else:
                attrs = ", ".join(f"{k}={v!r}" for k, v in n.attrs.items())
                call = f"{n.op}({', '.join(f'v{a}' for a in n.args)}{', ' if attrs else ''}{attrs})"
            lines.append(f"v{n.out.id} = {call:<70} # {n.out}{'' if n.out.exact else ' inexact'}")
        lines.append("return (" + ", ".join(f"v{o}" for o in self.outputs) + ")")
        return "\n".join(lines)

    def ops(self) -> list:
        return [n.op for n in self.nodes]


# -- running a program with TF ops --------------------------------------------------

def _slices(spec):
    out = []
    for s in spec:
        if s == "...":
            out.append(Ellipsis)
        elif s == "new":
            out.append(tf.newaxis)
        elif isinstance(s, int):
            out.append(s)
        else:
            out.append(slice(*s))
    return tuple(out)


COMPARE = {"less": tf.less, "greater": tf.greater, "less_equal": tf.less_equal,
            "greater_equal": tf.greater_equal, "equal": tf.equal, "not_equal": tf.not_equal}


def apply_op(n: Node, xs: list):
    """The TF ops of one node (also used on float64 error tensors for movement ops)."""
    a, op = n.attrs, n.op
    x = xs[0] if xs else None
    if op in ("add", "subtract", "multiply", "maximum", "minimum"):
        return getattr(tf.math, op)(xs[0], xs[1])
    if op in ("abs", "negative", "square", "tanh", "sigmoid"):
        return getattr(tf.math, op)(x)
    if op == "relu":
        return tf.nn.relu(x)
    if op == "exp_clip":
        return tf.exp(tf.clip_by_value(x, -CLIP, CLIP))
    if op == "sqrt_abs":
        return tf.sqrt(tf.abs(x))
    if op == "where":
        c = xs[3] if len(xs) > 3 else tf.constant(a["threshold"], xs[2].dtype)
        return tf.where(COMPARE[a["cmp"]](xs[2], c), xs[0], xs[1])
    if op == "cast":
        return tf.cast(x, a["to"])
    if op in ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean"):
        return getattr(tf.math, op)(x, axis=a["axis"], keepdims=a["keepdims"])
    if op == "softmax":
        return tf.nn.softmax(x, axis=-1)
    if op == "log_softmax":
        return tf.nn.log_softmax(x, axis=-1)
    if op == "reshape":
        return tf.reshape(x, a["shape"])
    if op == "transpose":
        return tf.transpose(x, a["perm"])
    if op == "expand_dims":
        return tf.expand_dims(x, a["axis"])
    if op == "squeeze":
        return tf.squeeze(x, a["axis"])
    if op == "getitem":
        return x[_slices(a["index"])]
    if op == "strided_slice":
        return tf.strided_slice(x, a["begin"], a["end"], a["strides"], begin_mask=a["begin_mask"],
                                end_mask=a["end_mask"], shrink_axis_mask=a["shrink_axis_mask"])
    if op == "slice":
        return tf.slice(x, a["begin"], a["size"])
    if op == "concat":
        return tf.concat(xs, a["axis"])
    if op == "pad":
        paddings = np.array(a["paddings"], np.int32).reshape(-1, 2)
        return tf.pad(x, paddings, constant_values=tf.constant(a["value"], x.dtype))
    if op == "tile":
        return tf.tile(x, a["multiples"])
    if op == "broadcast_to":
        return tf.broadcast_to(x, a["shape"])
    raise ValueError(op)


def build(p: Program):
    """The program as a Python function of TF tensors (for tf.function / tfjit.function)."""
    def program(*inputs):
        env = dict(zip((v.id for v in p.inputs), inputs))
        for n in p.nodes:
            env[n.out.id] = apply_op(n, [env[i] for i in n.args])
        return tuple(env[o] for o in p.outputs)
    return program


# -- error bounds ----------------------------------------------------------------------

def _f64(x):
    return tf.cast(x, tf.float64)


def error_bounds(p: Program, inputs: list) -> list:
    """Per output, a float64 array bounding |tfjit - TF| elementwise (see module doc)."""
    env = dict(zip((v.id for v in p.inputs), inputs))
    err = {v.id: tf.zeros(v.shape, tf.float64) for v in p.inputs}
    for n in p.nodes:
        xs = [env[i] for i in n.args]
        r = env[n.out.id] = apply_op(n, xs)
        if n.out.exact:
            err[n.out.id] = tf.zeros(n.out.shape, tf.float64)
        else:
            err[n.out.id] = tf.broadcast_to(_propagate(n, xs, [err[i] for i in n.args], r), n.out.shape)
    return [err[o].numpy() for o in p.outputs]


def _propagate(n: Node, xs, es, r):
    op, a = n.op, n.attrs
    u = UNIT_ROUNDOFF.get(n.out.dtype, 0.0)
    ulp_r = 2 * u * tf.abs(_f64(r))     # one ulp of the result, roughly
    k = ULPS_TRANSCENDENTAL
    if op in ("add", "subtract"):
        return es[0] + es[1] + ulp_r
    if op == "multiply":
        return es[0] * tf.abs(_f64(xs[1])) + es[1] * tf.abs(_f64(xs[0])) + es[0] * es[1] + ulp_r
    if op in ("maximum", "minimum"):
        return tf.maximum(es[0], es[1])
    if op in ("abs", "negative", "relu"):
        return es[0]
    if op == "square":
        return 2 * tf.abs(_f64(xs[0])) * es[0] + es[0] ** 2 + ulp_r
    if op == "exp_clip":
        return _f64(r) * tf.math.expm1(es[0]) + k * ulp_r
    if op == "tanh":
        return es[0] + k * ulp_r
    if op == "sigmoid":
        return es[0] / 4 + k * ulp_r
    if op == "sqrt_abs":
        ax = tf.abs(_f64(xs[0]))
        linear = tf.where(ax > 0, es[0] / (2 * tf.sqrt(tf.maximum(ax, 1e-300))), np.inf)
        return tf.minimum(tf.sqrt(es[0]), linear) + ulp_r
    if op == "where":
        cond = COMPARE[a["cmp"]](xs[2], xs[3] if len(xs) > 3 else tf.constant(a["threshold"], xs[2].dtype))
        return tf.where(cond, es[0], es[1])
    if op == "cast":
        return es[0] + (ulp_r if a["to"] == "float32" and n.args and xs[0].dtype == tf.float64 else 0)
    if op in ("reduce_max", "reduce_min"):
        return tf.reduce_max(es[0], axis=a["axis"], keepdims=a["keepdims"])
    if op in ("reduce_sum", "reduce_mean"):
        count = xs[0].shape.num_elements() // max(n.out.size, 1)
        total = tf.reduce_sum(es[0], axis=a["axis"], keepdims=a["keepdims"])
        total += 2 * count * u * tf.reduce_sum(tf.abs(_f64(xs[0])), axis=a["axis"], keepdims=a["keepdims"])
        return (total / count + ulp_r) if op == "reduce_mean" else total
    if op in ("softmax", "log_softmax"):
        count = xs[0].shape[-1]
        worst = tf.reduce_max(es[0], axis=-1, keepdims=True)
        relative = (k + 2 * count + 4) * 2 * u
        if op == "softmax":
            return _f64(r) * (tf.math.expm1(4 * worst) + relative)
        return 4 * worst + relative * (1 + tf.abs(_f64(r)))
    # data movement: the error moves with the data; padding is exact
    moved = dataclasses.replace(n, attrs=dict(a, value=0.0)) if op == "pad" else n
    return apply_op(moved, es)


# -- minimising a failing program -------------------------------------------------------

def minimize(p: Program, arrays: list, fails) -> tuple:
    """A smaller (program, arrays) for which ``fails(program, arrays)`` still holds.

    Greedy: keep fewer outputs, turn intermediate values into inputs (fed with
    their TF values), bypass nodes whose operand has the same type, drop dead nodes.
    """
    feeds = dict(zip((v.id for v in p.inputs), arrays))
    p = _prune(dataclasses.replace(p, nodes=list(p.nodes), outputs=list(p.outputs)))
    arrays = [feeds[v.id] for v in p.inputs]
    changed = True
    while changed:
        changed = False
        for candidate, cand_arrays in _smaller(p, arrays):
            if fails(candidate, cand_arrays):
                p, arrays, changed = candidate, cand_arrays, True
                break
    return p, arrays


def _prune(p: Program) -> Program:
    live = set(p.outputs)
    for n in reversed(p.nodes):
        if n.out.id in live:
            live.update(n.args)
    return dataclasses.replace(p, nodes=[n for n in p.nodes if n.out.id in live],
                               inputs=[v for v in p.inputs if v.id in live])


def _smaller(p: Program, arrays: list):
    feeds = dict(zip((v.id for v in p.inputs), arrays))
    env = {k: tf.constant(a) for k, a in feeds.items()}
    for n in p.nodes:
        env[n.out.id] = apply_op(n, [env[i] for i in n.args])

    def variant(nodes, outputs, inputs=None):
        q = _prune(Program(inputs or p.inputs, nodes, outputs))
        return q, [feeds[v.id] if v.id in feeds else env[v.id].numpy() for v in q.inputs]

    outs = list(dict.fromkeys(p.outputs))
    if len(p.outputs) > 1:
        for o in outs:
            yield variant(p.nodes, [o])
    if len(outs) < len(p.outputs):
        yield variant(p.nodes, outs)
    for k, n in enumerate(p.nodes):        # cut: n becomes an input
        feeds_v = dataclasses.replace(n.out, uses=0)
        yield variant(p.nodes[:k] + p.nodes[k + 1:], p.outputs, p.inputs + [feeds_v])
    for k, n in enumerate(p.nodes):        # bypass: n's users read an operand instead
        for a in dict.fromkeys(n.args):
            src = next(v for v in p.values if v.id == a)
            if (src.dtype, src.shape) == (n.out.dtype, n.out.shape):
                nodes = [dataclasses.replace(m, args=tuple(a if i == n.out.id else i for i in m.args))
                         for m in p.nodes[k + 1:]]
                yield variant(p.nodes[:k] + nodes, [a if o == n.out.id else o for o in p.outputs])
