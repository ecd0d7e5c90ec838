"""Sibling convolutions as one library call.

Keras's ConvLSTM2D cell splits its kernel in four gates and convolves its input with
each quarter, and its state with each quarter of the recurrent kernel: eight
convolutions of 8 filters per time step, where one of 32 per operand would do.  Its
gradient keeps the split: a filter gradient per quarter (concatenated back into the
kernel's gradient) and an input gradient per quarter (summed).  Each library call on
so few filters is mostly its fixed cost; TF's graph runs the same eight, and a
ConvLSTM2D(8) train step of [32, 6, 16, 16, 3] took 28 ms in graph mode, 31 with
tfjit, and 16 with the cell rewritten to convolve once per operand (scratch
clstm.py).  ``MergeSiblingConvolutions`` rewrites

* convolutions of one input with the same geometry (strides, dilations, padding,
  window and input depth) into one over their filters side by side, each result a
  slice of its channels;
* filter gradients of one input with the same geometry into one, against the
  output gradients side by side (each filter's gradient is a slice of it);
* input gradients with the same geometry that a sum adds into one, of the filters
  and output gradients side by side;

where filters that are slices of one filter along its outputs, all of it in order
(the split kernel), are that filter itself, and a concatenation of slices that
covers a value in order is the value (the kernel's gradient).  The output
gradients side by side are one concatenation shared by both gradients, which fusion
computes where the gates' derivatives are computed.

Only siblings of at most ``MAX_OUTPUTS`` filters each merge: past that a call is not
mostly its fixed cost, and merged wide convolutions (Inception's 1x1 heads) ran slower.
Sums are reassociated: a merged input gradient adds its terms inside the call, and
the sum's other terms after it.  Convolutions with a fused bias (passes/epilogue.py
runs first) are left alone: merged, each would lose its epilogue.
"""
from __future__ import annotations

from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Op

_GEOMETRY = ("strides", "dilations", "padding")
# Siblings of at most this many filters each merge.  ConvLSTM2D(8)'s train step (gates
# of 8): 31 -> 17 ms merged (graph 28); ConvLSTM2D(32) and (64): within 2% either way;
# InceptionV3's 1x1 heads (48-384 filters, batch 4, 96x96) merged: predict 13.5 -> 15.1
# ms, train 70.5 -> 75.5 (the filters' concatenation and the sliced reads cost more than
# the wider GEMM saves, as for Q/K/V products: docs/performance.md).
MAX_OUTPUTS = 16


class MergeSiblingConvolutions:
    name = "merge-sibling-convolutions"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, c: Module) -> bool:
        if sum(i.op in (Op.CONV, Op.CONV_BACKPROP_FILTER, Op.CONV_BACKPROP_INPUT)
               for i in c.instrs) < 2:
            return False
        made: list = []
        concats: dict = {}
        users = c.users()               # (as they are before any rewrite)
        changed = _forward(c, made) | _filter_gradients(c, users, made, concats)
        changed |= _input_gradients(c, users, made, concats)
        if changed:
            c.instrs = _operands_first(c.instrs + made)
            _fold_concatenated_slices(c)
        return changed


def _key(i: Instr, operand: Instr | None, window: tuple) -> tuple:
    """What siblings share: an operand (None: none), the type, the filter's window and
    depth, the strides, dilations and padding, and the result's shape but the
    channels."""
    return (id(operand), i.dtype, window, i.shape[:3], tuple(i.attrs.get(a) for a in _GEOMETRY))


def _groups(instrs, key, outputs) -> list:
    """Lists of two or more instructions sharing ``key(i)`` (None: none), each with at
    most ``MAX_OUTPUTS`` filters (``outputs(i)``)."""
    by: dict = {}
    for i in instrs:
        k = key(i) if outputs(i) <= MAX_OUTPUTS else None
        if k is not None:
            by.setdefault(k, []).append(i)
    return [g for g in by.values() if len(g) > 1]


def _covered(values: list, dim: int) -> Instr | None:
    """The value whose slices along ``dim`` ``values`` are, all of it in order (Keras's
    split kernel along the filters' outputs, a kernel's gradient concatenated back);
    None otherwise."""
    v, at = None, 0
    for o in values:
        if o.op is not Op.SLICE or (v is not None and o.operands[0] is not v) \
                or tuple(o.attrs["strides"]) != (1,) * o.rank \
                or tuple(o.attrs["starts"]) != tuple(at if k == dim else 0 for k in range(o.rank)) \
                or any(o.shape[k] != o.operands[0].shape[k] for k in range(o.rank) if k != dim):
            return None
        v, at = o.operands[0], at + o.shape[dim]
    return v if v is not None and at == v.shape[dim] else None


def _whole_filter(filters: list) -> Instr | None:
    """The filter W whose slices along its outputs ``filters`` are, all of it in order."""
    return _covered(filters, 3)


def _by_filter_slice(members: list, filter_of) -> list:
    """Members in the order of their filters' slices of one filter, where they are
    (so the merged filter is that filter); else as they come."""
    def start(i):
        f = filter_of(i)
        return f.attrs["starts"][3] if f.op is Op.SLICE else 0
    ordered = sorted(members, key=start)
    return ordered if _whole_filter([filter_of(i) for i in ordered]) is not None else members


def _side_by_side(values: list, made: list) -> Instr:
    """The values concatenated along the channels, or the filter they slice whole."""
    whole = _whole_filter(values)
    if whole is not None:
        return whole
    out = Instr(Op.CONCAT, values[0].dtype, values[0].shape[:3] + (sum(v.shape[3] for v in values),),
                tuple(values), {"dim": 3}, name=f"{values[0].name}.siblings")
    made.append(out)
    return out


def _as_slices(members: list, merged: Instr) -> None:
    """Each member becomes its slice of ``merged``'s channels, in place (its users
    read the slice)."""
    at = 0
    for i in members:
        i.op, i.operands = Op.SLICE, (merged,)
        i.attrs = {"starts": (0, 0, 0, at), "strides": (1, 1, 1, 1)}
        at += i.shape[3]


def _merged(kind: Op, members: list, operands: tuple, shape: tuple, made: list) -> Instr:
    first = members[0]
    out = Instr(kind, first.dtype, shape, operands, dict(first.attrs),
                name=f"{first.name}.merged", source=first.source)
    made.append(out)
    return out


def _forward(c: Module, made: list) -> bool:
    """Convolutions of one input (module docstring, first rule)."""
    convs = [i for i in c.instrs if i.op is Op.CONV]
    groups = _groups(convs, lambda i: _key(i, i.operands[0], i.operands[1].shape[:3]),
                     lambda i: i.shape[3])
    for members in groups:
        members = _by_filter_slice(members, lambda i: i.operands[1])
        w = _side_by_side([i.operands[1] for i in members], made)
        x = members[0].operands[0]
        y = _merged(Op.CONV, members, (x, w), members[0].shape[:3] + (w.shape[3],), made)
        _as_slices(members, y)
    return bool(groups)


def _output_gradients(members: list, made: list, concats: dict) -> Instr:
    """The members' output gradients side by side (one concatenation per list)."""
    grads = tuple(i.operands[1] for i in members)
    key = tuple(id(g) for g in grads)
    if key not in concats:
        concats[key] = _side_by_side(list(grads), made)
    return concats[key]


def _as_concatenated(members: list, concats: dict) -> list:
    """Members in the order in which their output gradients were put side by side
    already (for the filter gradients), where they were: one concatenation serves
    both."""
    at = {id(i.operands[1]): i for i in members}
    for key in concats:
        if set(key) == set(at) and len(key) == len(members):
            return [at[k] for k in key]
    return members


def _filter_gradients(c: Module, users: dict, made: list, concats: dict) -> bool:
    """Filter gradients of one input (module docstring, second rule), in the order a
    concatenation of all of them asks for, where one does (the kernel's gradient)."""
    grads = [i for i in c.instrs if i.op is Op.CONV_BACKPROP_FILTER]
    groups = _groups(grads, lambda i: _key(i, i.operands[0], i.shape[:3]), lambda i: i.shape[3])
    for members in groups:
        for u in {u for i in members for u in users[i]}:
            if u.op is Op.CONCAT and set(u.operands) >= set(members):
                members = [o for o in u.operands if o in members]
                break
        g = _output_gradients(members, made, concats)
        dw = _merged(Op.CONV_BACKPROP_FILTER, members, (members[0].operands[0], g),
                     members[0].shape[:3] + (g.shape[3],), made)
        _as_slices(members, dw)
    return bool(groups)


def _sum_terms(root: Instr, users: dict, outputs: set) -> list:
    """The terms of the add tree under ``root`` whose inner adds only it reads."""
    terms, stack = [], [root]
    while stack:
        i = stack.pop()
        if i.op is Op.ADD and (i is root or (len(users[i]) == 1 and i not in outputs)):
            stack.extend(reversed(i.operands))
        else:
            terms.append(i)
    return terms


def _input_gradients(c: Module, users: dict, made: list, concats: dict) -> bool:
    """Input gradients that one sum adds (module docstring, third rule): the sum's root
    becomes the merged gradients plus the sum's other terms, in their order."""
    outputs = set(c.outputs)
    changed = False
    for root in list(c.instrs):
        if root.op is not Op.ADD or (len(users[root]) == 1 and root not in outputs
                                     and users[root][0].op is Op.ADD):
            continue                    # (inside a larger sum)
        terms = _sum_terms(root, users, outputs)
        grads = [t for t in terms if t.op is Op.CONV_BACKPROP_INPUT and len(users[t]) == 1]
        groups = _groups(grads, lambda i: _key(i, None, i.operands[0].shape[:3])
                         if i.shape == root.shape else None, lambda i: i.operands[1].shape[3])
        if not groups:
            continue
        merged = []
        for members in groups:
            members = _by_filter_slice(_as_concatenated(members, concats), lambda i: i.operands[0])
            w = _side_by_side([i.operands[0] for i in members], made)
            g = _output_gradients(members, made, concats)
            merged.append(_merged(Op.CONV_BACKPROP_INPUT, members, (w, g), root.shape, made))
        summed = {id(i) for members in groups for i in members}
        parts = merged + [t for t in terms if id(t) not in summed]
        if len(parts) == 1:             # the root is the one merged call
            (one,) = parts
            root.op, root.operands, root.attrs = one.op, one.operands, one.attrs
            made.remove(one)
        else:
            total = parts[0]
            for t in parts[1:-1]:
                total = Instr(Op.ADD, root.dtype, root.shape, (total, t), name=f"{root.name}.part")
                made.append(total)
            root.operands = (total, parts[-1])
        changed = True
    return changed


def _fold_concatenated_slices(c: Module) -> None:
    """A concatenation of slices that covers one value in order along its dim is the
    value: each user reads the value instead."""
    replace = {}
    for i in c.instrs:
        i.operands = tuple(replace.get(o, o) for o in i.operands)
        whole = _covered(i.operands, i.attrs["dim"]) if i.op is Op.CONCAT else None
        if whole is not None:
            replace[i] = whole
    c.outputs = [replace.get(o, o) for o in c.outputs]


def _operands_first(instrs: list) -> list:
    """``instrs`` reordered so each comes after its operands, otherwise in order."""
    out, placed = [], set()
    for start in instrs:
        stack = [(start, False)]
        while stack:
            i, ready = stack.pop()
            if i in placed:
                continue
            if ready:
                placed.add(i)
                out.append(i)
                continue
            stack.append((i, True))
            stack.extend((o, False) for o in reversed(i.operands) if o not in placed)
    return out
