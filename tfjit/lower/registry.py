"""The lowering registry: one small function per TF op, registered by name.

A rule receives a ``LowerCtx`` (the module being built, the typed node, its
input instructions) and returns the IR instruction(s) for the node's outputs.
Cross-cutting work lives in the decorator, not in rule bodies:

* dtype checks (``dtypes=``): a node whose ``T`` (or the attr named by
  ``type_attr=``, e.g. the ``dtype`` of ops that make values) is not listed is
  refused with a reason before lowering, so marking and lowering agree;
* half precision (``half_in_f32=True``): f16/bf16 inputs are converted to f32,
  the rule computes in f32, and float results are converted back.

* compile-time constant operands (``const_inputs=``): the inputs whose value
  the rule reads with ``ctx.const`` (Reshape's shape, reduction axes, ...), as
  XLA's ``CompileTimeConstantInput``.  graph/const_args.py reads them to find
  the cluster inputs that must be constant arguments (compiled per value).

Complex tensors (lower/complex.py) are pairs of real IR values (``Complex``): a node
with a complex type attribute is lowered by its ``register_complex`` rule, or, for
ops listed with ``register_split`` (data movement, linear ops), by its real rule run
once on the real parts and once on the imaginary parts.

A rule that cannot lower a particular instance (e.g. a shape operand that is
not a compile-time constant) raises ``Unsupported`` with the reason.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tfjit import dtypes as dt
from tfjit.graph.graphdef import Node, TFType
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op

FLOATS = (dt.F16, dt.BF16, dt.F32, dt.F64)
INTS = (dt.I8, dt.I16, dt.I32, dt.I64, dt.U8, dt.U16, dt.U32, dt.U64)
NUMERIC = FLOATS + INTS
ALL = NUMERIC + (dt.PRED,)
# The quantized types that TF's CPU kernels of the plainest data movement (Identity,
# Reshape, ExpandDims, Squeeze, ConcatV2, GatherV2) run; Slice, StridedSlice, GatherNd
# and Pad's run only the 8-bit and 32-bit ones (QUANTIZED_8_32), Split's only quint8.
QUANTIZED_MOVES = ("qint8", "quint8", "qint16", "quint16", "qint32")
QUANTIZED_8_32 = ("qint8", "quint8", "qint32")


class Unsupported(Exception):
    """This node cannot be compiled; ``reason`` says why (shown to users)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class InvalidArgument(Unsupported):
    """The node's operands or attributes are invalid in TF's own terms: TF's kernel
    raises InvalidArgumentError for them, and ``reason`` is that error's text (TF's
    words).  Auto mode raises it as the launch op's error, as XLA does, instead of
    running TF's kernel only for it to raise; must-compile reports it like any refusal.
    Raise it only where TF's kernel (not just tfjit) refuses the value."""


@dataclasses.dataclass
class LowerCtx:
    m: Module
    node: Node
    inputs: list
    functions: object = None     # lowers library functions (graph_to_ir.Functions), for control flow

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    @property
    def dtype(self) -> dt.DType:
        """The node's ``T`` as an IR dtype (the value type of most ops)."""
        t = self.node.attrs.get("T")
        return t.ir if isinstance(t, TFType) else self.inputs[0].dtype

    def const(self, i: int, what: str) -> np.ndarray:
        """The value of input ``i``, which must be known at compile time."""
        x = self.inputs[i]
        if x.op is not Op.CONSTANT:
            raise Unsupported(f"{what} (input {i}) must be a compile-time constant")
        return x.value

    def const_ints(self, i: int, what: str) -> list:
        return [int(v) for v in np.asarray(self.const(i, what)).reshape(-1)]


@dataclasses.dataclass(frozen=True)
class Rule:
    fn: object
    dtypes: tuple
    half_in_f32: bool
    tf_passes: int = 1
    opaque_types: frozenset = frozenset()
    type_attr: str = "T"
    const_inputs: object = ()     # input indices (negative: from the end), or fn(node, value_of)
    quantized: frozenset = frozenset()   # quantized TF types (names) the op moves as integers


RULES: dict[str, Rule] = {}
VARIANT_RULES: dict[str, Rule] = {}   # the op on TF variant values (TensorLists): T=variant
COMPLEX_RULES: dict[str, Rule] = {}   # the op on complex tensors (any type attr complex)
SPLIT_OPS: set = set()                # complex = the real rule on both parts (register_split)


@dataclasses.dataclass(frozen=True, eq=False)
class Complex:
    """A complex tensor in lowering: its real and imaginary parts, two real IR values of
    the same shape and type (f32 for complex64, f64 for complex128)."""
    re: Instr
    im: Instr

    def __post_init__(self):
        if self.re.shape != self.im.shape or self.re.dtype is not self.im.dtype \
                or self.re.dtype not in (dt.F32, dt.F64):
            raise ValueError(f"complex parts {self.re.dtype}{list(self.re.shape)} and "
                             f"{self.im.dtype}{list(self.im.shape)} differ or are not f32/f64")

    @property
    def dtype(self) -> dt.DType:
        return dt.C64 if self.re.dtype is dt.F32 else dt.C128

    @property
    def shape(self) -> tuple:
        return self.re.shape

    @property
    def rank(self) -> int:
        return self.re.rank

    @property
    def size(self) -> int:
        return self.re.size


def register(*ops: str, dtypes=NUMERIC, half_in_f32: bool = False, tf_passes: int = 1,
             opaque_types=(), type_attr: str = "T", const_inputs=(), quantized=()):
    """``tf_passes``: how many passes over its tensors TF's own kernel for the op makes
    (Softmax: 4), or for a node grappler's remapper fused (lower/grappler_fused.py), how
    many ops it stands for; auto-clustering counts the node as that many effective ops, so
    an op that TF runs as several memory passes, and tfjit fuses, is worth a cluster alone,
    and a fused node counts as the ops the user wrote.
    ``opaque_types``: TF types (by name, e.g. "variant") the node's type attributes may
    list although tfjit computes no tensors of them (control flow carries TensorLists and
    variables as the values they stand for).  ``type_attr``: the attribute holding the
    value type the ``dtypes`` check applies to (ops that make values name it ``dtype``).
    ``const_inputs``: the inputs the rule needs as compile-time constants: indices
    (negative ones count from the last input), or ``fn(node, value_of) -> indices`` when
    that depends on the node (``value_of(i)``: input i's value when a Const makes it, else
    None).  ``quantized``: the quantized TF types (``QUANTIZED_MOVES`` and its subsets) the op
    takes: only pure data movement, and only the types TF's CPU kernel for it runs; the
    rule then sees their storage integer type (``ctx.dtype`` is i8 for qint8)."""
    def deco(fn):
        for op in ops:
            if op in RULES:
                raise ValueError(f"duplicate lowering for {op}")
            RULES[op] = Rule(fn, tuple(dtypes), half_in_f32, tf_passes, frozenset(opaque_types),
                             type_attr, const_inputs if callable(const_inputs) else tuple(const_inputs),
                             frozenset(quantized))
        return fn
    return deco


def register_variant(*ops: str):
    """The rule of ops like ZerosLike or AddN when their ``T`` is variant: the values are
    TensorLists (lower/tensor_list.py), not tensors, so the tensor rule does not apply."""
    def deco(fn):
        for op in ops:
            if op in VARIANT_RULES:
                raise ValueError(f"duplicate variant lowering for {op}")
            VARIANT_RULES[op] = Rule(fn, (), False, 1, frozenset({"variant"}))
        return fn
    return deco


def register_complex(*ops: str, const_inputs=()):
    """The rule of ops on complex tensors: its inputs are ``Complex`` pairs (and real
    values where the op takes them), it returns ``Complex`` pairs for complex outputs.
    The rule checks the types itself (raising ``Unsupported`` for what it refuses)."""
    def deco(fn):
        for op in ops:
            if op in COMPLEX_RULES or op in SPLIT_OPS:
                raise ValueError(f"duplicate complex lowering for {op}")
            COMPLEX_RULES[op] = Rule(fn, (), False, 1, frozenset(), "T",
                                     const_inputs if callable(const_inputs) else tuple(const_inputs))
        return fn
    return deco


def register_split(*ops: str):
    """Ops whose complex form is their real rule applied to the real parts and to the
    imaginary parts (data movement, sums): complex inputs are split, real ones (shapes,
    indices, predicates) go to both runs, and output k is the pair of the runs' k-th
    (or, when both runs pass a real input through, that input)."""
    for op in ops:
        if op in COMPLEX_RULES or op in SPLIT_OPS:
            raise ValueError(f"duplicate complex lowering for {op}")
        SPLIT_OPS.add(op)


def complex_type_of(node: Node) -> str | None:
    """The name of the first complex type among ``node``'s type attributes, or None."""
    for value in node.attrs.values():
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, TFType) and v.ir is not None and v.ir.is_complex:
                return v.name
    return None


def is_complex_node(node: Node) -> bool:
    """Whether any of ``node``'s type attributes is a complex type."""
    return complex_type_of(node) is not None


def part_node(node: Node) -> Node:
    """``node`` with every complex type attribute replaced by its parts' real type."""
    def part(v):
        if isinstance(v, TFType) and v.ir is not None and v.ir.is_complex:
            return TFType(v.ir.part.tf_enum, "float" if v.ir.part is dt.F32 else "double")
        return v
    attrs = {k: tuple(part(x) for x in v) if isinstance(v, tuple) else part(v)
             for k, v in node.attrs.items()}
    return dataclasses.replace(node, attrs=attrs)


def _split_fn(ctx: "LowerCtx"):
    real = part_node(ctx.node)
    runs = []
    for pick in (lambda c: c.re, lambda c: c.im):
        xs = [pick(x) if isinstance(x, Complex) else x for x in ctx.inputs]
        runs.append(lower_node(ctx.m, real, xs, ctx.functions))
    real = [x for x in ctx.inputs if not isinstance(x, Complex)]
    # a real input that both runs pass through stays real (IdentityN's real inputs)
    return [r if r is i and any(r is x for x in real) else Complex(r, i) for r, i in zip(*runs)]


def _rule(node: Node) -> Rule | None:
    t = node.attrs.get("T")
    if isinstance(t, TFType) and t.name == "variant" and node.op in VARIANT_RULES:
        return VARIANT_RULES[node.op]
    if is_complex_node(node):
        if node.op in SPLIT_OPS and node.op in RULES:
            real = RULES[node.op]
            return dataclasses.replace(real, fn=_split_fn, dtypes=(), half_in_f32=False)
        return COMPLEX_RULES.get(node.op)
    return RULES.get(node.op)


def const_inputs(node: Node, value_of=lambda i: None) -> list:
    """The indices of ``node``'s inputs that its lowering needs as compile-time constants
    (sorted, non-negative); ``value_of(i)``: input i's value when a Const makes it."""
    rule = _rule(node)
    if rule is None:
        return []
    spec = rule.const_inputs(node, value_of) if callable(rule.const_inputs) else rule.const_inputs
    n = len(node.inputs)
    return sorted({i % n for i in spec if -n <= i < n})


def multi_pass_ops() -> dict:
    """{op: tf_passes} for every op that counts as more than one (``register``)."""
    return {op: r.tf_passes for op, r in RULES.items() if r.tf_passes > 1}


def refusal(node: Node) -> str | None:
    """Why ``node`` has no lowering (None when it has one for its dtypes)."""
    rule = _rule(node)
    if rule is None:
        if is_complex_node(node):
            return f"no tfjit lowering for '{node.op}' on {complex_type_of(node)} tensors"
        return f"no tfjit lowering for '{node.op}'"
    for key, value in node.attrs.items():
        values = value if isinstance(value, tuple) else (value,)
        for v in values:
            if isinstance(v, TFType) and (v.ir is None or v.quantized and v.name not in rule.quantized) \
                    and v.name not in rule.opaque_types:
                return f"{node.op} with {key}={v.name}: tfjit does not compile {v.name} tensors"
    if is_complex_node(node):
        return None          # complex rules check their types themselves
    t = node.attrs.get(rule.type_attr)
    if isinstance(t, TFType) and t.ir not in rule.dtypes and t.name not in rule.opaque_types:
        return f"{node.op} has no tfjit lowering for dtype {t.name}"
    return None


def lower_node(m: Module, node: Node, inputs: list, functions=None) -> list:
    rule = _rule(node)
    reason = refusal(node)
    if reason:
        raise Unsupported(reason)
    m.source = node.name
    half = None
    if rule.half_in_f32:
        half = next((x.dtype for x in inputs if x.dtype in (dt.F16, dt.BF16)), None)
        inputs = [m.convert(x, dt.F32) if x.dtype in (dt.F16, dt.BF16) else x for x in inputs]
    out = rule.fn(LowerCtx(m, node, list(inputs), functions))
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if half is not None:
        outs = [m.convert(o, half) if o.dtype is dt.F32 else o for o in outs]
    return outs


# -- helpers shared by rule families ---------------------------------------

def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise Unsupported(f"incompatible shapes for broadcasting: {list(a)} vs {list(b)}")
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_to(m: Module, x: Instr, shape: tuple) -> Instr:
    """numpy-style broadcast of ``x`` to ``shape`` (trailing alignment)."""
    if x.shape == tuple(shape):
        return x
    offset = len(shape) - x.rank
    if offset < 0:
        raise Unsupported(f"cannot broadcast {list(x.shape)} to {list(shape)}")
    return m.broadcast(x, shape, range(offset, len(shape)))


def broadcast_all(m: Module, *xs: Instr) -> list:
    shape = ()
    for x in xs:
        shape = broadcast_shapes(shape, x.shape)
    return [broadcast_to(m, x, shape) for x in xs]


def text(value) -> str:
    """A string attribute's value (bytes in a GraphDef's decoded attrs) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def scalar_like(m: Module, value, like: Instr) -> Instr:
    return broadcast_to(m, m.scalar(value, like.dtype), like.shape)
