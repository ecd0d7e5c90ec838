"""TensorLists (TF's variant lists, behind TensorArray and Keras RNN loops) as buffers.

As in XLA (tf2xla's tensor_list_utils), a list whose element shape and maximum
size are static is a dense buffer ``items`` [capacity, *element] plus its length
(an i32[] that may be computed at run time, as by push/pop in a loop).  Getting
an item is a dynamic-slice, setting one a dynamic-update-slice of the buffer
(in place inside a loop: passes/buffers.py), so a Keras RNN loop compiles with
no variant tensor left.  Elements never set read as zeros, as TF's do when the
element shape is known.

A list also remembers, while it holds, that every element set so far is one
and the same constant (``constant``; ``fresh``: nothing set yet).  A loop's
gradient pushes such constants (shapes, lengths) into accumulator lists and pops
them in the backward loop, where they must be compile-time constants again
(TensorListReserve's size); control_flow.py carries this fact through loops.

Refused (with a reason): lists without a static capacity (EmptyTensorList with
max_num_elements=-1), an element shape that is still unknown where a value is
needed, and stacking a list whose length is only known at run time.  Indices
are not range-checked: an out-of-range index is clamped (as XLA does) where TF
raises an error.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr
from tfjit.ir.ops import Op
from tfjit.lower.registry import ALL, Unsupported, register, register_variant

_OPAQUE = ("variant",)


@dataclasses.dataclass(eq=False)
class TensorList:
    """A TensorList value during lowering (never an IR value itself)."""
    dtype: dt.DType
    capacity: int
    element: tuple | None        # None: unknown until an element is set
    items: Instr | None          # [capacity, *element]; None while the element is unknown
    length: Instr                # i32[]
    constant: np.ndarray | None = None   # every element set so far equals this constant
    fresh: bool = False                  # no element was set yet (EmptyTensorList)

    def parts(self) -> list:
        """The IR values that stand for this list (what a loop carries): its buffer and
        length, or only its length while the element shape is unknown."""
        return [self.length] if self.items is None else [self.items, self.length]

    def with_parts(self, parts: list) -> "TensorList":
        items, length = (None, parts[0]) if self.items is None else parts
        return dataclasses.replace(self, items=items, length=length)

    def joined(self, other: "TensorList") -> "TensorList":
        """This list (its parts) with what holds both for it and for ``other`` (what a
        loop may hand to its next iteration): a constant that both have, or that
        ``other`` has when this one is still fresh."""
        if self.fresh:
            return dataclasses.replace(self, constant=other.constant, fresh=other.fresh)
        same = (self.constant is not None and other.constant is not None and not other.fresh
                and self.constant.shape == other.constant.shape
                and np.array_equal(self.constant, other.constant))
        return dataclasses.replace(self, constant=self.constant if same or other.fresh else None)

    def same_facts(self, other: "TensorList") -> bool:
        if self.fresh != other.fresh or (self.constant is None) != (other.constant is None):
            return False
        return self.constant is None or (self.constant.shape == other.constant.shape
                                         and np.array_equal(self.constant, other.constant))

    def same_type(self, other) -> bool:
        return isinstance(other, TensorList) and (other.dtype, other.capacity, other.element) == \
            (self.dtype, self.capacity, self.element)


def _list(ctx, i: int = 0) -> TensorList:
    v = ctx.inputs[i]
    if not isinstance(v, TensorList):
        raise Unsupported(f"input {i} of {ctx.node.op} must be a TensorList")
    return v


def _element_shape(ctx, i: int) -> tuple | None:
    """A static element_shape operand: a tuple, or None when (partly) unknown."""
    dims = [int(d) for d in np.asarray(ctx.const(i, "the element_shape")).reshape(-1)]
    if np.asarray(ctx.inputs[i].value).ndim == 0 or any(d < 0 for d in dims):
        return None
    return tuple(dims)


def _count(ctx, i: int, what: str) -> int:
    n = int(np.asarray(ctx.const(i, what)).reshape(()))
    if n < 0:
        raise Unsupported(f"{ctx.node.op}: {what} is {n}; tfjit compiles lists of a static "
                          "maximum size")
    return n


def _zeros(ctx, dtype: dt.DType, shape: tuple) -> Instr:
    return ctx.m.broadcast(ctx.m.scalar(0, dtype), shape, ())


def _new(ctx, capacity: int, element, length: int) -> TensorList:
    dtype = ctx.attr("element_dtype").ir
    items = None if element is None else _zeros(ctx, dtype, (capacity,) + element)
    zeros = None if element is None or length == 0 else np.zeros(element, dtype.numpy())
    return TensorList(dtype, capacity, element, items, ctx.m.scalar(length, dt.I32), zeros,
                      fresh=length == 0)


def ready(ctx, lst: TensorList, element: tuple) -> TensorList:
    """``lst`` with a buffer for elements of shape ``element``."""
    if lst.element is None:
        items = _zeros(ctx, lst.dtype, (lst.capacity,) + tuple(element))
        return dataclasses.replace(lst, element=tuple(element), items=items)
    if tuple(element) != lst.element:
        raise Unsupported(f"{ctx.node.op}: an element of shape {list(element)} for a list of "
                          f"{list(lst.element)}")
    return lst


def _index(ctx, x: Instr) -> Instr:
    return ctx.m.convert(x, dt.I32) if x.dtype is not dt.I32 else x


def _write(ctx, lst: TensorList, index: Instr, item: Instr, length: Instr) -> TensorList:
    """``lst`` with ``item`` at ``index`` and the given length."""
    if item.dtype is not lst.dtype:
        raise Unsupported(f"{ctx.node.op}: a {item.dtype} item for a list of {lst.dtype}")
    lst = ready(ctx, lst, item.shape)
    zero = ctx.m.scalar(0, dt.I32)
    update = ctx.m.reshape(item, (1,) + item.shape)
    items = ctx.m.dynamic_update_slice(lst.items, update, [index] + [zero] * item.rank)
    value = item.value if item.op is Op.CONSTANT else None
    if value is not None and not lst.fresh and (lst.constant is None or not np.array_equal(lst.constant, value)):
        value = None
    return dataclasses.replace(lst, items=items, length=length, constant=value, fresh=False)


def _read(ctx, lst: TensorList, index: Instr, element_operand: int) -> Instr:
    if lst.constant is not None and not lst.fresh:      # every element is this constant
        return ctx.m.constant(lst.constant, lst.dtype)
    if lst.items is None:
        element = _element_shape(ctx, element_operand)
        if element is None:
            raise Unsupported(f"{ctx.node.op}: reading a list whose element shape is unknown")
        return _zeros(ctx, lst.dtype, element)
    zero = ctx.m.scalar(0, dt.I32)
    window = ctx.m.dynamic_slice(lst.items, [index] + [zero] * len(lst.element),
                                 (1,) + lst.element)
    return ctx.m.reshape(window, lst.element)


@register("TensorListReserve", dtypes=ALL, opaque_types=_OPAQUE, const_inputs=(0, 1))
def _reserve(ctx):
    n = _count(ctx, 1, "num_elements")
    return _new(ctx, n, _element_shape(ctx, 0), n)


@register("EmptyTensorList", dtypes=ALL, opaque_types=_OPAQUE, const_inputs=(0, 1))
def _empty(ctx):
    return _new(ctx, _count(ctx, 1, "max_num_elements"), _element_shape(ctx, 0), 0)


@register("TensorListFromTensor", dtypes=ALL, opaque_types=_OPAQUE)
def _from_tensor(ctx):
    x = ctx.inputs[0]
    if x.rank == 0:
        raise Unsupported("TensorListFromTensor of a scalar")
    return TensorList(x.dtype, x.shape[0], x.shape[1:], x, ctx.m.scalar(x.shape[0], dt.I32))


@register("TensorListGetItem", dtypes=ALL, opaque_types=_OPAQUE)
def _get_item(ctx):
    return _read(ctx, _list(ctx), _index(ctx, ctx.inputs[1]), 2)


@register("TensorListSetItem", dtypes=ALL, opaque_types=_OPAQUE)
def _set_item(ctx):
    if ctx.attr("resize_if_index_out_of_bounds"):
        raise Unsupported("TensorListSetItem with resize_if_index_out_of_bounds: the list's size "
                          "would depend on values")
    lst = _list(ctx)
    return _write(ctx, lst, _index(ctx, ctx.inputs[1]), ctx.inputs[2], lst.length)


@register("TensorListPushBack", dtypes=ALL, opaque_types=_OPAQUE)
def _push_back(ctx):
    lst = _list(ctx)
    length = ctx.m.elementwise(Op.ADD, lst.length, ctx.m.scalar(1, dt.I32))
    return _write(ctx, lst, lst.length, ctx.inputs[1], length)


@register("TensorListPopBack", dtypes=ALL, opaque_types=_OPAQUE)
def _pop_back(ctx):
    lst = _list(ctx)
    length = ctx.m.elementwise(Op.SUB, lst.length, ctx.m.scalar(1, dt.I32))
    item = _read(ctx, lst, length, 1)
    return [dataclasses.replace(lst, length=length), item]


@register("TensorListLength", dtypes=ALL, opaque_types=_OPAQUE)
def _length(ctx):
    return _list(ctx).length


@register("TensorListElementShape", dtypes=ALL, opaque_types=_OPAQUE)
def _list_element_shape(ctx):
    lst = _list(ctx)
    if lst.element is None:
        raise Unsupported("TensorListElementShape of a list whose element shape is unknown")
    return ctx.m.constant(np.asarray(lst.element), ctx.attr("shape_type").ir)


@register("TensorListStack", dtypes=ALL, opaque_types=_OPAQUE)
def _stack(ctx):
    lst = _list(ctx)
    if lst.length.op is not Op.CONSTANT:
        raise Unsupported("TensorListStack of a list whose length is only known at run time")
    n = int(lst.length.value)
    if lst.items is None:
        element = _element_shape(ctx, 1)
        if element is None:
            raise Unsupported("TensorListStack of a list whose element shape is unknown")
        return _zeros(ctx, lst.dtype, (n,) + element)
    return ctx.m.slice(lst.items, (0,) * lst.items.rank, (n,) + lst.element)


# -- the variant forms of generic ops (gradients of loops over lists use them) --------------------

@register_variant("ZerosLike")
def _zeros_like(ctx):
    lst = _list(ctx)
    items = None if lst.items is None else _zeros(ctx, lst.dtype, lst.items.shape)
    zeros = None if lst.element is None else np.zeros(lst.element, lst.dtype.numpy())
    return dataclasses.replace(lst, items=items, constant=zeros)


@register_variant("AddN")
def _add_n(ctx):
    """Element-wise sums of lists of one length (TF: unset elements count as zeros)."""
    lists = [_list(ctx, i) for i in range(len(ctx.inputs))]
    first = lists[0]
    known = [x for x in lists if x.items is not None]
    if not known:
        return first
    element = known[0].element
    if any(x.dtype is not first.dtype or x.capacity != first.capacity or
           x.element not in (None, element) for x in lists):
        raise Unsupported("AddN of TensorLists of different types, sizes or element shapes")
    total = known[0].items
    for x in known[1:]:
        total = ctx.m.elementwise(Op.ADD, total, x.items)
    return TensorList(first.dtype, first.capacity, element, total, first.length)
