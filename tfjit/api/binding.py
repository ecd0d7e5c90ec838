"""How ``tfjit.function`` binds a call's arguments and rebuilds its outputs, as
``tf.function`` does.

A call is bound to the Python signature (``inspect.Signature.bind``, defaults
applied), so a keyword lands on its parameter whatever the order it was given
in, and a default (a tensor too) is an argument like any other.  The bound
arguments are flattened with ``tf.nest`` in parameter order; their tensor leaves
(tensors, numpy arrays and numpy scalars, which ``tf.function`` also treats as
tensors) are the traced function's inputs, everything else is part of the
signature (a Python value retraces when it changes, as in ``tf.function``).

The function is traced through a wrapper that takes exactly those tensors, in
that order, and puts them back into the call's structure: which input is which
is then decided here, not inferred from TF's canonicalisation of keywords
(sorted, which swapped ``f(x=a, y=b)`` for ``def f(y, x)``).

``tf.Variable`` arguments are captured by the wrapper, as a variable the function
closed over would be: the launch reads and writes them as resource inputs, and the
signature holds the variable itself (one trace per variable, as a closure would).

Outputs: the traced function's flat outputs are its structured outputs flattened
with composites expanded (an ``IndexedSlices`` is values, indices, dense_shape), so
they are packed back the same way.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np
import tensorflow as tf


class Call:
    """One bound call: ``leaves`` in parameter order, and what rebuilds it.  ``flat``:
    the call is positional leaves alone (its structure is then its arity)."""
    __slots__ = ("structure", "leaves", "flat")

    def __init__(self, structure, leaves, flat: bool = False):
        self.structure = structure      # (args, kwargs) as bound, leaves included
        self.leaves = leaves
        self.flat = flat

    def inputs(self) -> list:
        """The traced function's inputs: the tensor (and numpy) leaves, in order."""
        return [x for x in self.leaves if is_input(x)]

    def key(self) -> tuple:
        """The signature: each leaf's key, and the containers' shape."""
        tree = _flat_tree(len(self.leaves)) if self.flat else _tree(self.structure)
        return (tree,) + tuple(leaf_key(x) for x in self.leaves)

    @tf.autograph.experimental.do_not_convert
    def rebuild(self, tensors):
        """(args, kwargs) with the input leaves replaced by ``tensors``, in order."""
        it = iter(tensors)
        leaves = [next(it) if is_input(x) else x for x in self.leaves]
        return tf.nest.pack_sequence_as(self.structure, leaves)

    def specs(self) -> list:
        """TensorSpecs of the inputs (a TensorSpec leaf stands for itself)."""
        return [x if isinstance(x, tf.TensorSpec) else
                tf.TensorSpec(x.shape, x.dtype) if isinstance(x, tf.Tensor) else
                tf.TensorSpec(np.shape(x), _dtype(x))
                for x in self.leaves if is_input(x)]


class Binder:
    """Binds calls to ``fn``'s signature as Python would; a call the signature refuses
    raises its TypeError.  A call of positional leaves only, one per parameter, takes a
    short path (the launch's hot path: a few microseconds)."""

    def __init__(self, fn):
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError):     # some builtins have none: bind as given
            self.signature = None
        params = self.signature.parameters.values() if self.signature is not None else ()
        self.var_keyword = [p.name for p in params if p.kind is p.VAR_KEYWORD]
        plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        self.plain_arity = len(params) if self.signature is not None and plain else -1

    def bind(self, args: tuple, kwargs: dict) -> Call:
        if not kwargs and len(args) == self.plain_arity:
            if not any(isinstance(a, _CONTAINERS) for a in args):
                return Call(((tuple(args), {})), list(args), flat=True)
        elif self.signature is not None:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            kw = dict(bound.kwargs)
            for name in self.var_keyword:    # **kwargs: the call's order is not part of it
                kw.update(kw.pop(name, {}))
            args, kwargs = bound.args, {k: kw[k] for k in sorted(kw)}
        structure = (tuple(args), dict(kwargs))
        return Call(structure, tf.nest.flatten(structure))


_CONTAINERS = (list, tuple, dict)


def is_input(x) -> bool:
    """A leaf that becomes a traced input (a tensor, numpy value or TensorSpec)."""
    return isinstance(x, (tf.Tensor, np.ndarray, np.generic, tf.TensorSpec)) \
        and not isinstance(x, tf.RaggedTensor)


def leaf_key(x):
    if isinstance(x, tf.Tensor):
        return (x.dtype, None if x.shape.rank is None else tuple(x.shape.as_list()))
    if isinstance(x, (np.ndarray, np.generic)):
        return (_dtype(x), np.shape(x))
    if isinstance(x, tf.TensorSpec):
        return (x.dtype, tuple(x.shape))
    if isinstance(x, tf.Variable):
        return ("variable", id(x))      # the entry holds the variable: the id stays its own
    if isinstance(x, tf.__internal__.CompositeTensor):
        raise TypeError(f"tfjit.function does not take {type(x).__name__} arguments yet; "
                        "pass its component tensors")
    try:
        hash(x)
    except TypeError:
        raise TypeError(f"tfjit.function: argument {x!r} is neither a tensor nor hashable") from None
    return ("py", type(x), x)


def _dtype(x) -> tf.DType:
    return tf.as_dtype(np.asarray(x).dtype)


def _tree(structure):
    """The containers of ``structure`` with leaves erased: list and tuple differ, as in
    tf.function's signature."""
    if isinstance(structure, dict):
        return ("dict",) + tuple((k, _tree(v)) for k, v in sorted(structure.items(), key=lambda kv: str(kv[0])))
    if isinstance(structure, (list, tuple)):
        return (type(structure).__name__,) + tuple(_tree(v) for v in structure)
    return None


@functools.lru_cache(maxsize=64)
def _flat_tree(n: int):
    """``_tree`` of n positional leaves, without walking them."""
    return ("tuple", ("tuple",) + (None,) * n, ("dict",))


def traceable(fn, call: Call):
    """A function of the call's input tensors alone that calls ``fn`` as called (named
    as ``fn``: the traced graph, its errors and its dumps carry that name)."""
    def traced(*tensors):
        args, kwargs = call.rebuild(tensors)
        return fn(*args, **kwargs)
    name = getattr(fn, "__name__", "fn")       # autograph takes "<lambda>" for a lambda to find
    traced.__name__ = traced.__qualname__ = "lambda" if name == "<lambda>" else name
    return traced


def pack_outputs(structured, flat):
    """The traced function's ``structured_outputs`` with its tensors taken from ``flat``
    (the launch's outputs), composites rebuilt from their components."""
    leaves = tf.nest.flatten(structured, expand_composites=True)
    it = iter(flat)
    leaves = [next(it) if isinstance(x, tf.Tensor) else x for x in leaves]
    return tf.nest.pack_sequence_as(structured, leaves, expand_composites=True)
