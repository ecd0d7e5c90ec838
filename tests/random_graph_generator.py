"""The random program generator of tests/test_random_graphs.py (see random_graphs.py).

``Generator(rng).generate()`` builds a DAG of 3-15 ops over 1-3 inputs (rank
0-4, dims 1-7, often broadcast-compatible or with size-1 dims; a few "large"
graphs have one long dim), float32 mostly, also float64 and int32.  Each op is
drawn by weight and applied to operands picked among earlier values (favouring
recent and unused ones, so the DAG fans out); shapes, dtypes, static magnitude
bounds and exactness are tracked so every program is valid TF and stays in the
ranges random_graphs.error_bounds covers.
"""
from __future__ import annotations

import math

import numpy as np

from random_graphs import COMPARE, CLIP, FLOATS, Node, Program, Value

FLOAT_CAP = 1e5
INT_CAP = 2 ** 24
MAX_ELEMENTS = 4096
MIN_OPS, MAX_OPS = 3, 15
LARGE_FRACTION = 0.12       # graphs with one long dim (up to LARGE_ELEMENTS): flat/split/column kernels
LARGE_ELEMENTS = 1 << 16

# Known tfjit bugs: patterns the generator avoids until they are fixed, by name
# -> the bug (its reproducer goes to test_random_graphs.REGRESSIONS, marked
# xfail).  TFJIT_TEST_INCLUDE_KNOWN_BUGS=1 generates them again, to check a fix.
# All bugs found so far are fixed (see REGRESSIONS).
KNOWN_BUGS: dict = {}
EXCLUDE: set = set(KNOWN_BUGS)
SIGNED_ZERO_UNSTABLE = ("maximum", "minimum", "relu", "reduce_max", "reduce_min", "softmax", "log_softmax")


class Generator:
    """Builds one random Program from ``rng`` (see ``generate``)."""

    def __init__(self, rng: np.random.Generator, exclude=EXCLUDE):
        self.rng = rng
        self.exclude = exclude
        self.p = None
        self.max_elements = MAX_ELEMENTS

    # helpers ---------------------------------------------------------------------------
    def chance(self, q: float) -> bool:
        return self.rng.random() < q

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def pick(self, ok=lambda v: True):
        """A value satisfying ``ok``, favouring recent and not yet used ones (None if none)."""
        vals = [v for v in self.p.values if ok(v)]
        if not vals:
            return None
        last = len(self.p.values)
        w = np.array([(1.0 + (v.id >= last - 3) * 2.0) * (3.0 if v.uses == 0 else 1.0) for v in vals])
        return vals[int(self.rng.choice(len(vals), p=w / w.sum()))]

    def cap(self, dtype: str) -> float:
        return FLOAT_CAP if dtype in FLOATS else INT_CAP

    def add(self, op, args, attrs, dtype, shape, bound, exact) -> Value | None:
        shape = tuple(int(d) for d in shape)
        if bound > self.cap(dtype) or math.prod(shape) > self.max_elements or 0 in shape:
            return None
        v = Value(len(self.p.values), dtype, shape, float(bound), exact,
                  zero_sign=op not in SIGNED_ZERO_UNSTABLE and all(a.zero_sign for a in args))
        for a in args:
            a.uses += 1
        self.p.nodes.append(Node(op, tuple(a.id for a in args), attrs, v))
        return v

    def random_shape(self, rank=None) -> tuple:
        rank = int(self.rng.integers(0, 5)) if rank is None else rank
        return tuple(int(self.rng.integers(1, 8)) if not self.chance(0.15) else 1 for _ in range(rank))

    def compatible_shape(self, base: tuple) -> tuple:
        """A shape that broadcasts with ``base``: drop leading dims, set some dims to 1."""
        drop = int(self.rng.integers(0, len(base) + 1)) if self.chance(0.5) else 0
        return tuple(1 if self.chance(0.3) else d for d in base[drop:])

    # the program ------------------------------------------------------------------------
    def generate(self) -> Program:
        rng = self.rng
        r = rng.random()
        dtype = "float32" if r < 0.7 else "float64" if r < 0.85 else "int32"
        base = self.random_shape()
        if rng.random() < LARGE_FRACTION:
            self.max_elements = LARGE_ELEMENTS
            base = self.random_shape(int(rng.integers(1, 5)))
            d = int(rng.integers(len(base)))
            rest = math.prod(base) // base[d]
            base = base[:d] + (int(rng.integers(16, max(17, LARGE_ELEMENTS // rest))),) + base[d + 1:]
        inputs = []
        for k in range(int(rng.integers(1, 4))):
            d = dtype if not self.chance(0.1) else self.choice(["float32", "float64", "int32"])
            r = rng.random()
            shape = base if k == 0 or r < 0.4 else self.compatible_shape(base) if r < 0.8 else self.random_shape()
            inputs.append(Value(k, d, shape, 5.0 if d == "int32" else 2.0, True))
        self.p = Program(inputs)
        target = int(rng.integers(MIN_OPS, MAX_OPS + 1))
        attempts = 0
        while len(self.p.nodes) < target and attempts < 400:
            attempts += 1
            op = self.choice(OP_NAMES_WEIGHTED)
            GENERATORS[op](self)
        self.p.outputs = self.choose_outputs()
        return self.p

    def choose_outputs(self) -> list:
        p = self.p
        nodes = p.nodes
        if not nodes:
            return [p.inputs[0].id]
        outs = [nodes[-1].out.id]
        unused = [n.out.id for n in nodes[:-1] if n.out.uses == 0]
        others = [n.out.id for n in nodes[:-1]]
        for _ in range(int(self.rng.choice(3, p=[0.5, 0.3, 0.2]))):
            pool = unused if unused and self.chance(0.7) else others
            if pool:
                outs.append(self.choice(pool))
        if self.chance(0.03):
            outs.append(self.choice([v.id for v in p.inputs] + outs))   # pass-through / duplicate
        return outs

    # op generators (each may fail silently: returns None) ----------------------------------
    def binary(self, op):
        x = self.pick()
        y = self.pick(lambda v: v.dtype == x.dtype and broadcast(v.shape, x.shape) is not None)
        shape = broadcast(x.shape, y.shape)
        bound = {"add": x.bound + y.bound, "subtract": x.bound + y.bound,
                 "multiply": x.bound * y.bound}.get(op, max(x.bound, y.bound))
        return self.add(op, [x, y], {}, x.dtype, shape, bound, x.exact and y.exact)

    def unary(self, op):
        floats_only = op in ("exp_clip", "tanh", "sigmoid", "sqrt_abs")
        x = self.pick(lambda v: v.is_float or not floats_only)
        if x is None:
            return None
        bound = {"square": x.bound ** 2, "exp_clip": math.exp(CLIP), "tanh": 1.0, "sigmoid": 1.0,
                 "sqrt_abs": math.sqrt(x.bound)}.get(op, x.bound)
        exact = x.exact and op not in ("exp_clip", "tanh", "sigmoid")
        return self.add(op, [x], {}, x.dtype, x.shape, bound, exact)

    def where(self, _op):
        x = self.pick()
        y = self.pick(lambda v: v.dtype == x.dtype and broadcast(v.shape, x.shape) is not None)
        shape = broadcast(x.shape, y.shape)
        c = self.pick(lambda v: v.exact and broadcast(v.shape, shape) is not None)
        if c is None:
            return None
        attrs = {"cmp": self.choice(list(COMPARE))}
        args = [x, y, c]
        d = self.pick(lambda v: v.exact and v.dtype == c.dtype and broadcast(v.shape, broadcast(c.shape, shape))
                      is not None) if self.chance(0.5) else None
        if d is not None:
            args.append(d)
            shape = broadcast(shape, d.shape)
        else:
            attrs["threshold"] = self.choice([0, 1]) if c.dtype == "int32" else self.choice([0.0, 0.5, -0.25])
        shape = broadcast(shape, c.shape)
        return self.add("where", args, attrs, x.dtype, shape, max(x.bound, y.bound), x.exact and y.exact)

    def cast(self, _op):
        x = self.pick()
        to = self.choice([d for d in ("float32", "float64", "int32") if d != x.dtype])
        if to == "int32" and not x.exact:
            return None        # truncation is discontinuous: only exact values
        return self.add("cast", [x], {"to": to}, to, x.shape, x.bound, x.exact)

    def reduce(self, op):
        x = self.pick()
        axes = [d for d in range(x.rank) if self.chance(0.5)]
        if x.rank and not axes and self.chance(0.8):
            axes = [int(self.rng.integers(x.rank))]
        kind = self.rng.random()
        if kind < (0.5 if self.max_elements > MAX_ELEMENTS else 0.15) or not x.rank:     # large: split reductions
            axis = None
            axes = list(range(x.rank))
        elif kind < 0.3 and len(axes) == 1:
            axis = axes[0] - x.rank if self.chance(0.5) else axes[0]
        else:
            axis = [a - x.rank if self.chance(0.3) else a for a in axes]
        keep = self.chance(0.4)
        shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keep or d not in axes)
        count = math.prod(x.shape[d] for d in axes)
        bound = x.bound * count if op == "reduce_sum" else x.bound
        exact = x.exact and (op in ("reduce_max", "reduce_min") or x.dtype == "int32" or count == 1)
        return self.add(op, [x], {"axis": axis, "keepdims": keep}, x.dtype, shape, bound, exact)

    def softmax(self, op):
        x = self.pick(lambda v: v.is_float and 1 <= v.rank <= 5)     # TF (oneDNN): rank <= 5
        if x is None:
            return None
        bound = 1.0 if op == "softmax" else 2 * x.bound + math.log(x.shape[-1]) + 1
        return self.add(op, [x], {}, x.dtype, x.shape, bound, False)

    def reshape(self, _op):
        x = self.pick()
        shape = factor(self.rng, x.size, int(self.rng.integers(0, 5)))
        spec = list(shape)
        if spec and self.chance(0.3):
            spec[int(self.rng.integers(len(spec)))] = -1
        return self.add("reshape", [x], {"shape": spec}, x.dtype, shape, x.bound, x.exact)

    def transpose(self, _op):
        x = self.pick(lambda v: v.rank >= 2)
        if x is None:
            return None
        perm = [int(d) for d in self.rng.permutation(x.rank)]
        return self.add("transpose", [x], {"perm": perm}, x.dtype, [x.shape[d] for d in perm], x.bound, x.exact)

    def expand_dims(self, _op):
        x = self.pick(lambda v: v.rank < 4)
        if x is None:
            return None
        axis = int(self.rng.integers(-x.rank - 1, x.rank + 1))
        pos = axis % (x.rank + 1)
        shape = x.shape[:pos] + (1,) + x.shape[pos:]
        return self.add("expand_dims", [x], {"axis": axis}, x.dtype, shape, x.bound, x.exact)

    def squeeze(self, _op):
        x = self.pick(lambda v: 1 in v.shape)
        if x is None:
            return None
        ones = [d for d, n in enumerate(x.shape) if n == 1]
        if self.chance(0.4):
            axis, shape = None, tuple(n for n in x.shape if n != 1)
        else:
            d = self.choice(ones)
            axis, shape = [d - x.rank if self.chance(0.4) else d], x.shape[:d] + x.shape[d + 1:]
        return self.add("squeeze", [x], {"axis": axis}, x.dtype, shape, x.bound, x.exact)

    def getitem(self, _op):
        x = self.pick(lambda v: v.rank >= 1)
        if x is None:
            return None
        spec, shape = [], []
        dims = list(x.shape)
        use_ellipsis = self.chance(0.15) and len(dims) >= 2
        keep = int(self.rng.integers(len(dims))) if use_ellipsis else len(dims)
        for d, n in enumerate(dims[:keep]):
            if self.chance(0.1):
                spec.append("new")
                shape.append(1)
            if self.chance(0.15):
                spec.append(int(self.rng.integers(-n, n)))      # shrink
                continue
            sl = self.random_slice(n)
            spec.append(sl)
            shape.append(len(range(*slice(*sl).indices(n))))
        if use_ellipsis:
            spec.append("...")
            shape += dims[keep:]
        return self.add("getitem", [x], {"index": spec}, x.dtype, shape, x.bound, x.exact)

    def random_slice(self, n: int) -> tuple:
        step = self.choice([1, 1, 1, 2, -1, -1, -2, 3])
        while True:
            b = None if self.chance(0.3) else int(self.rng.integers(-n - 1, n + 1))
            e = None if self.chance(0.3) else int(self.rng.integers(-n - 1, n + 2))
            if len(range(*slice(b, e, step).indices(n))) > 0:
                return (b, e, step)
            if self.chance(0.2):
                return (None, None, step)

    def strided_slice(self, _op):
        x = self.pick(lambda v: v.rank >= 1)
        if x is None:
            return None
        begin, end, strides, shape = [], [], [], []
        bmask = emask = smask = 0
        for d, n in enumerate(x.shape):
            if self.chance(0.15):
                i = int(self.rng.integers(-n, n))
                begin.append(i), end.append(i + 1), strides.append(1)
                smask |= 1 << d
                continue
            b, e, s = self.random_slice(n)
            if b is None:
                bmask |= 1 << d
            if e is None:
                emask |= 1 << d
            begin.append(b or 0), end.append(e or 0), strides.append(s)
            shape.append(len(range(*slice(b, e, s).indices(n))))
        attrs = {"begin": begin, "end": end, "strides": strides, "begin_mask": bmask, "end_mask": emask,
                 "shrink_axis_mask": smask}
        return self.add("strided_slice", [x], attrs, x.dtype, shape, x.bound, x.exact)

    def slice(self, _op):
        x = self.pick(lambda v: v.rank >= 1)
        if x is None:
            return None
        begin = [int(self.rng.integers(n)) for n in x.shape]
        size = [int(self.rng.integers(1, n - b + 1)) if self.chance(0.8) else -1 for b, n in zip(begin, x.shape)]
        shape = [n - b if s == -1 else s for b, s, n in zip(begin, size, x.shape)]
        return self.add("slice", [x], {"begin": begin, "size": size}, x.dtype, shape, x.bound, x.exact)

    def concat(self, _op):
        x = self.pick(lambda v: v.rank >= 1)
        if x is None:
            return None
        axis = int(self.rng.integers(x.rank))

        def fits(v):
            return v.dtype == x.dtype and v.rank == x.rank and all(
                a == b for d, (a, b) in enumerate(zip(v.shape, x.shape)) if d != axis)
        parts = [x] + [self.pick(fits) for _ in range(int(self.rng.integers(1, 3)))]
        shape = list(x.shape)
        shape[axis] = sum(v.shape[axis] for v in parts)
        attrs = {"axis": axis - x.rank if self.chance(0.3) else axis}
        return self.add("concat", parts, attrs, x.dtype, shape, max(v.bound for v in parts),
                        all(v.exact for v in parts))

    def pad(self, _op):
        x = self.pick()
        paddings = [[int(self.rng.integers(0, 3)), int(self.rng.integers(0, 3))] for _ in x.shape]
        value = self.choice([0, 0, 3, -1]) if x.dtype == "int32" else self.choice([0.0, 0.0, 1.5, -1.0])
        shape = [n + lo + hi for n, (lo, hi) in zip(x.shape, paddings)]
        return self.add("pad", [x], {"paddings": paddings, "value": value}, x.dtype, shape,
                        max(x.bound, abs(value)), x.exact)

    def tile(self, _op):
        x = self.pick(lambda v: v.rank >= 1)
        if x is None:
            return None
        multiples = [int(self.rng.integers(1, 4)) if self.chance(0.5) else 1 for _ in x.shape]
        shape = [n * k for n, k in zip(x.shape, multiples)]
        return self.add("tile", [x], {"multiples": multiples}, x.dtype, shape, x.bound, x.exact)

    def broadcast_to(self, _op):
        x = self.pick(lambda v: v.rank < 4)
        if x is None:
            return None
        lead = int(self.rng.integers(0, 5 - x.rank))
        shape = [int(self.rng.integers(1, 5)) for _ in range(lead)]
        shape += [int(self.rng.integers(2, 6)) if n == 1 and self.chance(0.7) else n for n in x.shape]
        return self.add("broadcast_to", [x], {"shape": shape}, x.dtype, shape, x.bound, x.exact)


def broadcast(a: tuple, b: tuple):
    """numpy's broadcast of two shapes, or None when incompatible."""
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def factor(rng, n: int, rank: int) -> tuple:
    """A random shape of ``rank`` dims (plus size-1 dims) whose product is ``n``."""
    if rank == 0:
        return () if n == 1 else (n,)
    dims = [1] * rank
    k, p = n, 2
    while k > 1:
        while k % p == 0:
            dims[int(rng.integers(rank))] *= p
            k //= p
        p += 1
    return tuple(dims)


_WEIGHTS = {
    "add": 4, "subtract": 3, "multiply": 4, "maximum": 2, "minimum": 2,
    "abs": 1, "negative": 1, "square": 1, "relu": 1.5, "exp_clip": 1.5, "tanh": 1.5, "sigmoid": 1,
    "sqrt_abs": 1, "where": 2, "cast": 1.5,
    "reduce_sum": 2, "reduce_max": 1.5, "reduce_min": 1, "reduce_mean": 1.5,
    "softmax": 1, "log_softmax": 1,
    "reshape": 1.5, "transpose": 1.5, "expand_dims": 1, "squeeze": 1,
    "getitem": 1.5, "strided_slice": 1, "slice": 1, "concat": 1.5, "pad": 1, "tile": 1, "broadcast_to": 1,
}
OP_NAMES_WEIGHTED = [op for op, w in _WEIGHTS.items() for _ in range(int(w * 2))]

GENERATORS = {}
for _op in _WEIGHTS:
    if _op in ("add", "subtract", "multiply", "maximum", "minimum"):
        GENERATORS[_op] = lambda g, _o=_op: g.binary(_o)
    elif _op in ("abs", "negative", "square", "relu", "exp_clip", "tanh", "sigmoid", "sqrt_abs"):
        GENERATORS[_op] = lambda g, _o=_op: g.unary(_o)
    elif _op.startswith("reduce_"):
        GENERATORS[_op] = lambda g, _o=_op: g.reduce(_o)
    elif _op in ("softmax", "log_softmax"):
        GENERATORS[_op] = lambda g, _o=_op: g.softmax(_o)
    else:
        GENERATORS[_op] = lambda g, _o=_op: getattr(g, _o)(_o)


def make_inputs(rng: np.random.Generator, p: Program) -> list:
    """Input arrays: uniform in [-2, 2] (ints in [-5, 5]); some graphs get ties and signed zeros."""
    ties = rng.random() < 0.15
    out = []
    for v in p.inputs:
        if v.dtype == "int32":
            out.append(rng.integers(-5, 6, size=v.shape).astype(np.int32))
        elif ties:
            out.append(rng.choice(np.array([-1.0, -0.5, -0.0, 0.0, 0.5, 1.0]), size=v.shape).astype(v.dtype))
        else:
            out.append(rng.uniform(-2, 2, size=v.shape).astype(v.dtype))
    return out
