"""Functional control flow: While/StatelessWhile (and tf2xla's XlaWhile, the same
loop without shape attrs), If/StatelessIf, Case/StatelessCase, and function calls
(PartitionedCall/StatefulPartitionedCall, inlined).

The condition, body and branches are library functions (graph/functions.py);
each is lowered into a computation of its own, whose parameters are the values
it is given, with the shapes they have in this compilation (after tf2xla's
while_op.cc / if_op.cc):

* A While's carried values must keep their dtype and shape across iterations
  (TF's shape invariants may relax a shape; tfjit compiles one static shape).
  The trip count is dynamic: the condition runs every iteration.  Values the
  body passes through unchanged are loop invariant: the loop's result is the
  initial value, and a constant one is sunk into the condition and body as a
  constant (so a shape or an axis that a loop carries stays a compile-time
  constant, as XLA's constant sinking does).  Those the body's graph returns
  through identities are sunk from the first lowering on, so a body that needs
  one as a constant (graph/const_args.py made it a constant argument) lowers.
* An If/Case runs only its taken branch; a constant predicate or index inlines
  that branch.  All branches must produce the same dtypes and shapes.
* Resource variables may be read in a body or branch (they read the value the
  variable has when the loop or conditional starts, which is what TF reads when
  nothing assigns it inside).  A branch may assign them too (Keras's optimizer
  under mixed_float16 skips the update on non-finite gradients in a tf.cond, its
  EMA and gradient accumulation update in one): every branch then returns the
  variable's value at its end as one more output (the value it was given where it
  does not assign it), which the variable holds after the conditional -- as
  tf2xla's if_op.cc returns the resources a branch updates.  Assigning a variable
  in a loop body is refused.
* TensorLists (lower/tensor_list.py) cross as their buffer and length.  A list
  whose element shape is still unknown when a loop starts (a TensorArray made
  without element_shape) takes the shape of the items the body sets: the body
  is lowered once to find it, as tf2xla compiles such a body twice.
"""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.graph.functions import passes_through
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op
from tfjit.lower.registry import ALL, Unsupported, register
from tfjit.lower.tensor_list import TensorList, ready
from tfjit.lower.variables import Variable

_OPAQUE = ("variant", "resource")


def _parts(v) -> list:
    """The IR values that stand for one TF value inside a computation."""
    if isinstance(v, Instr):
        return [v]
    if isinstance(v, Variable):
        return [v.value]
    if isinstance(v, TensorList):
        return v.parts()
    raise Unsupported(f"a {type(v).__name__} cannot cross into a loop body or branch")


def _rebuild(template, parts: list):
    """A value like ``template`` made of ``parts`` (inside a called computation)."""
    if isinstance(template, Instr):
        return parts[0]
    if isinstance(template, Variable):
        return Variable(-1, parts[0])        # the variable inside: _branches returns what
                                             # a branch assigns, _Call refuses it elsewhere
    return template.with_parts(parts)


def _describe(v) -> str:
    return " ".join(f"{p.dtype.name}{list(p.shape)}" for p in _parts(v))


class _Call:
    """Lowers one library function into a computation: its parameters are the
    non-constant parts of ``args``, the constant ones (``sink``) become constants."""

    def __init__(self, ctx, fname: str, args: list, sink: set, name: str,
                 assigns: bool = False):
        self.flat = [p for a in args for p in _parts(a)]
        m = Module(name)
        parts = [m.constant(p.value, p.dtype) if k in sink else m.parameter(p.dtype, p.shape)
                 for k, p in enumerate(self.flat)]
        self.inner, pos = [], 0
        for a in args:
            n = len(_parts(a))
            self.inner.append(_rebuild(a, parts[pos:pos + n]))
            pos += n
        self.parts, self.module = parts, m
        self.results = ctx.functions.lower(m, fname, self.inner, ctx.node)
        for a, inner in zip(args, self.inner):
            if isinstance(inner, Variable) and inner.assigned and not assigns:
                raise Unsupported(f"{fname} assigns a resource variable: tfjit compiles variable "
                                  f"updates inside If and Case branches, not inside {ctx.node.op} "
                                  "(assign it outside)")

    def result_parts(self, what: str) -> list:
        out = []
        for j, r in enumerate(self.results):
            if isinstance(r, Variable):
                raise Unsupported(f"{what} returns a resource handle (output {j}) that is not "
                                  "passed through unchanged")
            out += _parts(r)
        return out


# -- While ---------------------------------------------------------------------------------

@register("While", "StatelessWhile", "XlaWhile", dtypes=ALL, opaque_types=_OPAQUE)
def _while(ctx):
    args, cond_fn, body_fn = list(ctx.inputs), ctx.attr("cond"), ctx.attr("body")
    sink = _invariant_constants(ctx.functions.graph(body_fn), args)
    name = ctx.functions.computation_name
    body_name, cond_name = name(f"{ctx.node.name}.body"), name(f"{ctx.node.name}.cond")
    unknown = [k for k, a in enumerate(args) if isinstance(a, TensorList) and a.items is None]
    if unknown:               # find the element shapes that the body's items have
        probe = _Call(ctx, body_fn, args, sink, body_name)
        for k in unknown:
            r = probe.results[k] if k < len(probe.results) else None
            if not isinstance(r, TensorList) or r.element is None:
                raise Unsupported(f"TensorList loop variable {k} has no element shape: neither "
                                  f"its element_shape nor body {body_fn} sets one")
            args[k] = ready(ctx, args[k], r.element)
    # Lowered again until what the body is given settles: the constant loop invariants
    # found are sunk into it, and what holds for TensorLists in every iteration (a
    # constant pushed each time) is what it may assume.
    for _ in range(6):
        body = _Call(ctx, body_fn, args, sink, body_name)
        flat = body.flat
        if len(body.results) != len(args):
            raise Unsupported(f"body {body_fn} returns {len(body.results)} values for "
                              f"{len(args)} loop variables")
        outs = []                 # the body's next value of every part
        for k, (a, r) in enumerate(zip(args, body.results)):
            if isinstance(a, Variable):
                if r is not body.inner[k]:
                    raise Unsupported(f"body {body_fn} replaces resource loop variable {k}")
                outs += _parts(r)         # its value is the body's parameter: invariant
                continue
            if type(r) is not type(a) or isinstance(a, TensorList) and not a.same_type(r) \
                    or _describe(r) != _describe(a):
                raise Unsupported(f"loop variable {k} is {_describe(a)} on entry and "
                                  f"{_describe(r) if not isinstance(r, Variable) else 'a resource'} "
                                  f"after body {body_fn}: tfjit compiles loops whose values keep "
                                  "their shape (shape invariants that relax it are not supported)")
            outs += _parts(r)
        invariant = {k for k, (p, o) in enumerate(zip(body.parts, outs)) if o is p}
        wanted = {k for k in invariant if flat[k].op is Op.CONSTANT}
        if wanted != sink:        # first settle what is sunk: facts found before are weaker
            sink = wanted
            continue
        facts = [a.joined(r) if isinstance(a, TensorList) else a for a, r in zip(args, body.results)]
        if all(not isinstance(a, TensorList) or a.same_facts(f) for a, f in zip(args, facts)):
            break
        args = facts
    else:
        raise Unsupported(f"lowering body {body_fn} did not settle on its loop variables")
    cond = _Call(ctx, cond_fn, args, sink, cond_name)
    if len(cond.results) != 1 or not isinstance(cond.results[0], Instr):
        raise Unsupported(f"condition {cond_fn} must return one tensor")
    cond.module.outputs = [_truth(cond.module, cond.results[0])]
    carried = [k for k in range(len(flat)) if k not in sink]   # = the computations' params
    body.module.outputs = [outs[k] for k in carried]
    changing = [k for k in carried if k not in invariant]
    if not changing:              # nothing changes: the loop's values are its inputs
        return args
    w = ctx.m.while_loop(cond.module, body.module, [flat[k] for k in carried])
    results = [flat[k] if k in invariant else ctx.m.get_tuple_element(w, carried.index(k))
               for k in range(len(flat))]
    out, pos = [], 0
    for a in args:
        n = len(_parts(a))
        out.append(a if isinstance(a, Variable) else _rebuild(a, results[pos:pos + n]))
        pos += n
    return out


def _invariant_constants(body, args: list) -> set:
    """The flat parts of the constant tensor loop variables that ``body`` returns
    unchanged (its graph says so: functions.passes_through)."""
    out, pos = set(), 0
    for k, a in enumerate(args):
        n = len(_parts(a))
        if isinstance(a, Instr) and a.op is Op.CONSTANT and passes_through(body, k):
            out.add(pos)
        pos += n
    return out


def _truth(m: Module, x: Instr) -> Instr:
    """TF's truth value of a condition: a bool, a nonzero number, a non-empty tensor."""
    if x.rank:
        return m.scalar(x.size > 0, dt.PRED)
    if x.dtype is dt.PRED:
        return x
    return m.elementwise(Op.NE, x, m.scalar(0, x.dtype))


# -- function calls -------------------------------------------------------------------------

@register("PartitionedCall", "StatefulPartitionedCall", dtypes=ALL, opaque_types=_OPAQUE)
def _call(ctx):
    """A call of a library function (a tf.function called from another, Keras layers that
    wrap theirs), inlined: the body is lowered into the caller with the call's values, as
    tf2xla compiles a call into the caller's computation.  Variables and TensorLists go
    in as themselves, so an assignment in the body is the caller's."""
    return ctx.functions.lower(ctx.m, ctx.attr("f"), list(ctx.inputs), ctx.node)


# -- If / Case -------------------------------------------------------------------------------

@register("If", "StatelessIf", dtypes=ALL, opaque_types=_OPAQUE)
def _if(ctx):
    pred = _truth(ctx.m, ctx.inputs[0])
    branches = [ctx.attr("then_branch"), ctx.attr("else_branch")]
    if pred.op is Op.CONSTANT:
        return ctx.functions.lower(ctx.m, branches[0 if pred.value else 1], ctx.inputs[1:], ctx.node)
    return _branches(ctx, pred, branches)


@register("Case", "StatelessCase", dtypes=ALL, opaque_types=_OPAQUE)
def _case(ctx):
    index, branches = ctx.inputs[0], list(ctx.attr("branches"))
    if index.shape != () or index.dtype is not dt.I32:
        raise Unsupported("Case needs an int32 scalar branch index")
    if index.op is Op.CONSTANT:
        k = int(index.value)
        fname = branches[k] if 0 <= k < len(branches) else branches[-1]
        return ctx.functions.lower(ctx.m, fname, ctx.inputs[1:], ctx.node)
    return _branches(ctx, index, branches)


def _branches(ctx, selector: Instr, fnames: list) -> list:
    args = list(ctx.inputs[1:])
    flat = [p for a in args for p in _parts(a)]
    sink = {k for k, p in enumerate(flat) if p.op is Op.CONSTANT}    # branches only read them
    calls = [_Call(ctx, f, args, sink, ctx.functions.computation_name(f"{ctx.node.name}.branch{k}"),
                   assigns=True) for k, f in enumerate(fnames)]
    first = calls[0]
    for c, fname in zip(calls[1:], fnames[1:]):
        if len(c.results) != len(first.results) or any(
                type(a) is not type(b) or _describe(a) != _describe(b)
                for a, b in zip(c.results, first.results)):
            raise Unsupported(f"branch {fname} returns ({', '.join(map(_describe, c.results))}), "
                              f"branch {fnames[0]} ({', '.join(map(_describe, first.results))}): "
                              "tfjit needs one static shape per output")
    assigned = _assigned_in_branches(ctx, args, calls)
    results = [c.result_parts(f"branch {f}") + [c.inner[k].value for k in assigned]
               for c, f in zip(calls, fnames)]
    if not results[0]:
        return []
    kept = [k for k in range(len(flat)) if k not in sink]      # = the branches' params
    for c, parts in zip(calls, results):
        c.module.outputs = parts
    cond = ctx.m.conditional(selector, [c.module for c in calls], [flat[k] for k in kept])
    elements = [ctx.m.get_tuple_element(cond, j) for j in range(len(results[0]))]
    out, pos = [], 0
    for r in first.results:
        n = len(_parts(r))
        out.append(elements[pos] if isinstance(r, Instr) else r.with_parts(elements[pos:pos + n]))
        pos += n
    for k, value in zip(assigned, elements[pos:]):
        args[k].assign(value)
    return out


def _assigned_in_branches(ctx, args: list, calls: list) -> list:
    """The positions of the variables some branch assigns, checked: each keeps its
    dtype and shape, and is passed once (two views of one variable would not see each
    other's assignments)."""
    assigned = [k for k, a in enumerate(args) if isinstance(a, Variable)
                and any(c.inner[k].assigned for c in calls)]
    for k in assigned:
        if sum(a is args[k] for a in args) > 1:
            raise Unsupported(f"{ctx.node.op} {ctx.node.name}: a resource variable passed "
                              f"twice (input {k + 1}) is assigned in a branch")
        for c in calls:
            if _describe(c.inner[k].value) != _describe(args[k]):
                raise Unsupported(f"{ctx.node.op} {ctx.node.name}: a branch assigns "
                                  f"{_describe(c.inner[k].value)} to resource input {k + 1}, "
                                  f"a {_describe(args[k])} variable")
    return assigned

