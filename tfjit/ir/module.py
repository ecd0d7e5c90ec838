"""IR containers: ``Instr`` (one typed value, ir/instr.py) and ``Module`` (a computation).

A module is a list of instructions in topological order, a list of parameters
(the cluster's inputs, in order) and a list of outputs.  Builders check shapes
as they add instructions, so a lowering that produces a malformed module fails
at the offending instruction with a readable message instead of in codegen.

Control flow nests modules, as HLO nests computations: a ``while`` instruction
calls a condition and a body module, a ``conditional`` one module per branch
(``Instr.called``; the attributes hold their names, for the text form).  A
called module's parameters are the values handed to it; it never reads an
instruction of its caller.  ``Module.computations()`` lists every module a
module calls, directly or not, callees first.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.ops import (COMPARISONS, LIBM, SHIFTS, SPECIAL, TYPED_RESULT, Kind, Op,
                          REDUCE_KINDS, SCAN_KINDS, SCATTER_KINDS)
# Instr and its limits live in ir/instr.py, the library-call builders in ir/library_calls.py
# (re-exported here: every pass imports them from this module)
from tfjit.ir.instr import (FOLD_MAX_ELEMENTS, INDEX_DTYPES,  # noqa: F401
                            MAX_ELEMENTS, TUPLE, Instr, IRError, _type_list, reshaped_source)
from tfjit.ir.library_calls import LibraryCalls


def _check_types(op: Op, operand: dt.DType, result: dt.DType | None) -> None:
    """Element types the bit-level, libm and RNG ops accept (others are checked by their users)."""
    if op in SHIFTS and not operand.is_int:
        raise IRError(f"{op.spelling} needs integer operands, not {operand}")
    if op is Op.XOR and not (operand.is_int or operand is dt.PRED):
        raise IRError(f"xor needs integer or pred operands, not {operand}")
    if (op in LIBM or op in SPECIAL) and operand not in (dt.F32, dt.F64):
        raise IRError(f"{op.spelling} needs f32 or f64 operands, not {operand}")
    if op is Op.BITCAST and (result is None or dt.PRED in (operand, result) or operand.bits != result.bits):
        raise IRError(f"bitcast-convert from {operand} to {result}: widths differ or a type is pred")
    if op is Op.FMA and operand is not dt.F32:
        # f32 only: the interpreter computes it exactly in f64 (interp._fma), which it
        # could not do for f64 operands
        raise IRError(f"fma needs f32 operands, not {operand}")
    if op is Op.TRUNCATED_NORMAL and (operand is not dt.U32 or result not in (dt.F32, dt.F64)):
        raise IRError(f"truncated-normal takes u32 operands and gives f32 or f64, not {operand} -> {result}")


class Module(LibraryCalls):
    def __init__(self, name: str):
        self.name = name
        self.params: list[Instr] = []
        self.instrs: list[Instr] = []
        self.outputs: list[Instr] = []
        self._ids = itertools.count()
        self.source = ""                 # stamped on instructions added next
        self.folder = None               # folder(instr, operand_values) -> ndarray | None
        # Resource variables: indices of params that are variables' values, and of the
        # variables whose new values are the trailing outputs (written back after a run).
        self.variable_params: set = set()
        self.updates: list = []
        # Complex edges (lower/complex.py): a complex parameter is its real view
        # part[S + [2]] with attrs["complex"] naming the complex type; outputs listed
        # here ({output index: complex DType}) are such views of complex results.
        self.complex_outputs: dict = {}
        # Quantized edges: a quantized parameter is its storage integer type with
        # attrs["quantized"] naming the TF type; outputs listed here ({output index:
        # quantized DType}) are handed to TF as that type (dtypes.py).
        self.quantized_outputs: dict = {}
        # Data-dependent shapes (lower/where.py): {output j: output c}: j is computed in
        # its bound and TF gets its first rows, as many as the i64 output c (a last one)
        # holds; while lowering, ``bounded`` maps such a value to its count.
        self.output_rows: dict = {}
        self.bounded: dict = {}

    # -- bookkeeping --------------------------------------------------------
    def _add(self, instr: Instr) -> Instr:
        if instr.size > MAX_ELEMENTS or any(d < 0 for d in instr.shape):
            raise IRError(f"shape {list(instr.shape)} of {instr.op.spelling} is too large or negative")
        if self.folder and instr.operands and instr.size <= FOLD_MAX_ELEMENTS \
                and instr.op.kind is not Kind.CONTROL \
                and all(o.op is Op.CONSTANT for o in instr.operands):
            value = self.folder(instr, [o.value for o in instr.operands])
            if value is not None:
                instr = Instr(Op.CONSTANT, instr.dtype, instr.shape, value=value, source=instr.source)
        instr.name = instr.name or f"{instr.op.spelling.split('-')[0]}.{next(self._ids)}"
        instr.source = instr.source or self.source
        self.instrs.append(instr)
        return instr

    def computations(self) -> list:
        """Every module this one calls (directly or through called modules), callees first."""
        out, seen = [], set()

        def visit(m):
            for i in m.instrs:
                for c in i.called:
                    if id(c) not in seen:
                        seen.add(id(c))
                        visit(c)
                        out.append(c)
        visit(self)
        return out

    def users(self) -> dict:
        users = {i: [] for i in self.instrs}
        for i in self.instrs:
            for o in i.operands:
                if i not in users[o]:
                    users[o].append(i)
        return users

    @staticmethod
    def reachable(roots) -> set:
        """``roots`` and every instruction they depend on."""
        live, stack = set(), list(roots)
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(i.operands)
        return live

    def live_users(self) -> dict:
        """``users()`` without the readers no output depends on (what an earlier pass
        replaced and left for DCE is no reader)."""
        live = self.reachable(self.outputs)
        return {i: [u for u in us if u in live] for i, us in self.users().items()}

    def renumber(self) -> None:
        """Drops unreachable instructions and renames the rest densely."""
        live = self.reachable(list(self.outputs) + list(self.params))
        self.instrs = [i for i in self.instrs if i in live]
        counter = itertools.count()
        for i in self.instrs:
            i.name = "p%d" % i.index if i.op is Op.PARAMETER else f"{i.op.spelling.split('-')[0]}.{next(counter)}"

    def boundary_params(self) -> list:
        """[(DType, shape)] of the parameters as TensorFlow sees them (complex ones as
        their complex type and shape, not the real view the IR reads; quantized ones as
        their quantized type)."""
        return [(dt.from_name(p.attrs["complex"]), p.shape[:-1]) if "complex" in p.attrs
                else (dt.from_name(p.attrs["quantized"]), p.shape) if "quantized" in p.attrs
                else (p.dtype, p.shape) for p in self.params]

    def outputs_with_views(self) -> set:
        """Positions of the outputs whose buffer is read through a view: rows that depend
        on the data, variable updates, complex and quantized values (their shape is the
        buffer's contract with the launch op)."""
        n = len(self.outputs)
        return set(self.output_rows) | set(self.complex_outputs) | set(self.quantized_outputs) \
            | set(range(n - len(self.updates), n))

    def boundary_outputs(self) -> list:
        """[(DType, shape)] of the outputs as TensorFlow sees them (see boundary_params)."""
        return [(self.complex_outputs[j], o.shape[:-1]) if j in self.complex_outputs
                else (self.quantized_outputs[j], o.shape) if j in self.quantized_outputs
                else (o.dtype, o.shape) for j, o in enumerate(self.outputs)]

    # -- builders -----------------------------------------------------------
    def parameter(self, dtype: dt.DType, shape) -> Instr:
        p = self._add(Instr(Op.PARAMETER, dtype, tuple(shape), index=len(self.params)))
        p.name = f"p{p.index}"
        self.params.append(p)
        return p

    def constant(self, value, dtype: dt.DType) -> Instr:
        arr = np.asarray(value, dtype=dtype.numpy())
        return self._add(Instr(Op.CONSTANT, dtype, tuple(arr.shape), value=arr))

    def scalar(self, value, dtype: dt.DType) -> Instr:
        return self.constant(np.asarray(value), dtype)

    def iota(self, dtype: dt.DType, shape, dim: int) -> Instr:
        return self._add(Instr(Op.IOTA, dtype, tuple(shape), attrs={"dim": dim}))

    def elementwise(self, op: Op, *operands: Instr, dtype: dt.DType | None = None) -> Instr:
        if op.kind is not Kind.ELEMENTWISE or len(operands) != op.arity:
            raise IRError(f"{op.spelling} is not an elementwise op of arity {len(operands)}")
        shapes = {o.shape for o in operands}
        if len(shapes) != 1:
            raise IRError(f"{op.spelling}: operand shapes differ: {[list(o.shape) for o in operands]}")
        value_operands = operands[1:] if op is Op.SELECT else operands
        if op is not Op.CONVERT and len({o.dtype for o in value_operands}) != 1:
            raise IRError(f"{op.spelling}: operand types differ: {[o.dtype for o in value_operands]}")
        if op is Op.SELECT and operands[0].dtype is not dt.PRED:
            raise IRError("select: predicate must be pred")
        if op in TYPED_RESULT and dtype is None:
            raise IRError(f"{op.spelling} needs its result type")
        _check_types(op, operands[0].dtype, dtype)
        if dtype is None:
            pred_result = op in COMPARISONS or op in (Op.IS_NAN, Op.IS_INF, Op.IS_FINITE)
            dtype = dt.PRED if pred_result else value_operands[0].dtype
        return self._add(Instr(op, dtype, operands[0].shape, tuple(operands)))

    def convert(self, x: Instr, dtype: dt.DType) -> Instr:
        return x if x.dtype is dtype else self.elementwise(Op.CONVERT, x, dtype=dtype)

    def bitcast(self, x: Instr, dtype: dt.DType) -> Instr:
        return x if x.dtype is dtype else self.elementwise(Op.BITCAST, x, dtype=dtype)

    def broadcast(self, x: Instr, shape, dims) -> Instr:
        shape, dims = tuple(shape), tuple(dims)
        if len(dims) != x.rank or any(shape[d] != s and s != 1 for d, s in zip(dims, x.shape)) \
                or list(dims) != sorted(set(dims)) or any(d >= len(shape) for d in dims):
            raise IRError(f"broadcast of {list(x.shape)} to {list(shape)} with dims {list(dims)} is invalid")
        if shape == x.shape:
            return x
        return self._add(Instr(Op.BROADCAST, x.dtype, shape, (x,), {"dims": dims}))

    def reshape(self, x: Instr, shape) -> Instr:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != x.size:
            raise IRError(f"cannot reshape {list(x.shape)} to {list(shape)}")
        if shape == x.shape:
            return x
        return self._add(Instr(Op.RESHAPE, x.dtype, shape, (x,)))

    def transpose(self, x: Instr, perm) -> Instr:
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(x.rank)):
            raise IRError(f"transpose of rank {x.rank} with invalid perm {list(perm)}")
        if perm == tuple(range(x.rank)):
            return x
        shape = tuple(x.shape[p] for p in perm)
        return self._add(Instr(Op.TRANSPOSE, x.dtype, shape, (x,), {"perm": perm}))

    def slice(self, x: Instr, starts, sizes, strides=None) -> Instr:
        strides = tuple(strides or (1,) * x.rank)
        starts, sizes = tuple(starts), tuple(sizes)
        for d, (b, n, s) in enumerate(zip(starts, sizes, strides)):
            last = b + (n - 1) * s
            if n < 0 or s == 0 or (n > 0 and not (0 <= b < x.shape[d] and 0 <= last < x.shape[d])):
                raise IRError(f"slice dim {d}: start {b} size {n} stride {s} out of bounds {x.shape[d]}")
        if starts == (0,) * x.rank and sizes == x.shape and strides == (1,) * x.rank:
            return x
        return self._add(Instr(Op.SLICE, x.dtype, sizes, (x,), {"starts": starts, "strides": strides}))

    def pad(self, x: Instr, value: Instr, low, high) -> Instr:
        low, high = tuple(low), tuple(high)
        if value.shape != () or value.dtype is not x.dtype:
            raise IRError("pad value must be a scalar of the operand's type")
        shape = tuple(s + a + b for s, a, b in zip(x.shape, low, high))
        if any(a < 0 or b < 0 for a, b in zip(low, high)):
            raise IRError("negative padding")
        if shape == x.shape:
            return x
        return self._add(Instr(Op.PAD, x.dtype, shape, (x, value), {"low": low, "high": high}))

    def concat(self, xs, dim: int) -> Instr:
        xs = [x for x in xs]
        base = xs[0]
        for x in xs:
            if x.rank != base.rank or x.dtype is not base.dtype or \
                    any(a != b for d, (a, b) in enumerate(zip(x.shape, base.shape)) if d != dim):
                raise IRError("concatenate: operands disagree in rank, type or non-concat dims")
        if len(xs) == 1:
            return base
        shape = list(base.shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        return self._add(Instr(Op.CONCAT, base.dtype, tuple(shape), tuple(xs), {"dim": dim}))

    def reduce(self, x: Instr, kind: str, ndims: int) -> Instr:
        """Reduces the trailing ``ndims`` dimensions of ``x``."""
        if kind not in REDUCE_KINDS or not 0 <= ndims <= x.rank:
            raise IRError(f"reduce kind={kind} ndims={ndims} on rank {x.rank}")
        if ndims == 0:
            return x
        shape = x.shape[:x.rank - ndims]
        return self._add(Instr(Op.REDUCE, x.dtype, shape, (x,), {"kind": kind, "ndims": ndims}))

    def argreduce(self, x: Instr, kind: str, dtype: dt.DType) -> Instr:
        """Index of the first max/min along the last dimension, as TF's kernel: from index 0
        and the dtype's lowest (highest) finite value, only a strictly better element
        wins, so NaN never does and a line of NaN, -inf or that value gives 0."""
        if kind not in ("max", "min") or x.rank == 0 or x.shape[-1] == 0:
            raise IRError(f"argreduce kind={kind} needs a non-empty last dimension")
        return self._add(Instr(Op.ARGREDUCE, dtype, x.shape[:-1], (x,), {"kind": kind}))

    # -- run-time indices ----------------------------------------------------
    def _starts(self, op: str, x: Instr, starts) -> tuple:
        starts = tuple(starts)
        if len(starts) != x.rank or any(s.shape != () or not s.dtype.is_int for s in starts):
            raise IRError(f"{op} of rank {x.rank} needs {x.rank} integer scalar start indices")
        return starts

    def dynamic_slice(self, x: Instr, starts, sizes) -> Instr:
        """The window of ``sizes`` at run-time ``starts`` (clamped into ``x``, as HLO's)."""
        sizes, starts = tuple(int(s) for s in sizes), self._starts("dynamic-slice", x, starts)
        if len(sizes) != x.rank or any(not 0 <= n <= d for n, d in zip(sizes, x.shape)):
            raise IRError(f"dynamic-slice of {list(x.shape)} with sizes {list(sizes)} is invalid")
        return self._add(Instr(Op.DYNAMIC_SLICE, x.dtype, sizes, (x,) + starts))

    def dynamic_update_slice(self, x: Instr, update: Instr, starts) -> Instr:
        """``x`` with the window at run-time ``starts`` (clamped) replaced by ``update``."""
        starts = self._starts("dynamic-update-slice", x, starts)
        if update.dtype is not x.dtype or update.rank != x.rank \
                or any(u > d for u, d in zip(update.shape, x.shape)):
            raise IRError(f"dynamic-update-slice of {x.dtype.name}{list(x.shape)} with "
                          f"{update.dtype.name}{list(update.shape)} is invalid")
        return self._add(Instr(Op.DYNAMIC_UPDATE_SLICE, x.dtype, x.shape, (x, update) + starts))

    # -- control flow --------------------------------------------------------
    def while_loop(self, cond: "Module", body: "Module", operands) -> Instr:
        """Runs ``body`` on the carried values while ``cond`` (one pred[] output) holds.

        ``operands`` are the initial values; cond and body take them as parameters,
        and body returns their next values, with the same types and shapes."""
        operands = tuple(operands)
        types = _types(operands)
        if _types(cond.params) != types or _types(body.params) != types:
            raise IRError(f"while: condition {cond.name} takes {_type_list(cond.params)}, body "
                          f"{body.name} takes {_type_list(body.params)}; the operands are "
                          f"{_type_list(operands)}")
        if _types(body.outputs) != types:
            raise IRError(f"while: body {body.name} returns {_type_list(body.outputs)} for "
                          f"carried values {_type_list(operands)}")
        if _types(cond.outputs) != ((dt.PRED, ()),):
            raise IRError(f"while: condition {cond.name} must return one pred[], "
                          f"not {_type_list(cond.outputs)}")
        return self._add(Instr(Op.WHILE, TUPLE, (), operands,
                               {"condition": cond.name, "body": body.name},
                               called=(cond, body), results=types))

    def conditional(self, selector: Instr, branches, operands) -> Instr:
        """Runs one branch on ``operands``: with a pred[] selector, branches[0] when true
        and branches[1] when false; with an i32[] selector, branches[selector], or the
        last branch when it is out of range (TF's Case)."""
        branches, operands = tuple(branches), tuple(operands)
        pred = selector.dtype is dt.PRED
        if selector.shape != () or not (pred and len(branches) == 2
                                        or selector.dtype is dt.I32 and branches):
            raise IRError(f"conditional: a pred[] selector needs 2 branches, an i32[] one at "
                          f"least 1; got {selector.dtype.name}{list(selector.shape)} with "
                          f"{len(branches)}")
        types = _types(operands)
        results = _types(branches[0].outputs)
        for c in branches:
            if _types(c.params) != types:
                raise IRError(f"conditional: branch {c.name} takes {_type_list(c.params)}, "
                              f"the operands are {_type_list(operands)}")
            if _types(c.outputs) != results:
                raise IRError(f"conditional: branch {c.name} returns {_type_list(c.outputs)}, "
                              f"branch {branches[0].name} {_type_list(branches[0].outputs)}")
        return self._add(Instr(Op.CONDITIONAL, TUPLE, (), (selector,) + operands,
                               {"branch_computations": tuple(c.name for c in branches)},
                               called=branches, results=results))

    def get_tuple_element(self, t: Instr, index: int) -> Instr:
        if not t.is_tuple or not 0 <= index < len(t.results):
            raise IRError(f"get-tuple-element {index} of a {len(t.results)}-tuple"
                          if t.is_tuple else "get-tuple-element of a non-tuple value")
        dtype, shape = t.results[index]
        return self._add(Instr(Op.GET_TUPLE_ELEMENT, dtype, shape, (t,), {"index": index}))

    # -- data-dependent indexing ------------------------------------------------
    def gather(self, x: Instr, indices: Instr, axis: int, batch_dims: int = 0) -> Instr:
        """TF's GatherV2: ``x.shape[:axis] + indices.shape[batch_dims:] + x.shape[axis+1:]``;
        the leading ``batch_dims`` dims of x and indices are shared (batch_dims <= axis).
        An index outside [0, x.shape[axis]) is a runtime error."""
        if indices.dtype not in INDEX_DTYPES or not 0 <= batch_dims <= axis < x.rank \
                or batch_dims > indices.rank or x.shape[:batch_dims] != indices.shape[:batch_dims]:
            raise IRError(f"gather of {x.dtype.name}{list(x.shape)} at {indices.dtype.name}"
                          f"{list(indices.shape)} with axis={axis} batch_dims={batch_dims} is invalid")
        shape = x.shape[:axis] + indices.shape[batch_dims:] + x.shape[axis + 1:]
        return self._add(Instr(Op.GATHER, x.dtype, shape, (x, indices),
                               {"axis": axis, "batch_dims": batch_dims}))

    def scatter(self, data: Instr, ids: Instr, kind: str, segments: int, init: Instr | None = None,
                bounds: str = "segment", index_shape: tuple = ()) -> Instr:
        """Segment reduction: result[s, c] combines data[j, c] over every j with
        ids[j] == s, in increasing j, from ``init[s, c]`` or else ``scatter_identity``
        (kinds: ops.SCATTER_KINDS).  ``bounds="segment"`` (TF's UnsortedSegment* on
        [N, C] data): negative ids are dropped, ids >= segments are a runtime error;
        ``"index"`` (TF's ResourceScatter* into a variable): every id outside
        [0, segments) is an error, in TF's words for indices, naming the position in the
        indices as shaped before they were flattened (``index_shape``).  Data of rank 3,
        [A, N, C], is A independent scatters by the same ids: result[a, s, c]
        (passes/transposes.py ``ScatterBetweenTransposes``: the segment sum along a middle dim
        that TF's gather gradient makes between two transposes)."""
        shape = data.shape[:-2] + (segments, data.shape[-1]) if data.rank in (2, 3) else None
        if kind not in SCATTER_KINDS or shape is None or ids.rank != 1 or ids.dtype not in INDEX_DTYPES \
                or data.shape[-2] != ids.shape[0] or segments < 0 or data.dtype is dt.PRED \
                or bounds not in ("segment", "index") \
                or (init is not None and (init.dtype is not data.dtype or init.shape != shape)):
            raise IRError(f"scatter kind={kind} of {data.dtype.name}{list(data.shape)} by "
                          f"{ids.dtype.name}{list(ids.shape)} into {segments} segments is invalid")
        operands = (data, ids) if init is None else (data, ids, init)
        if bounds == "index" and math.prod(index_shape) != ids.shape[0]:
            raise IRError(f"scatter: index_shape {list(index_shape)} for {ids.shape[0]} ids")
        attrs = {"kind": kind} if bounds == "segment" else \
            {"kind": kind, "bounds": bounds, "index_shape": tuple(index_shape)}
        return self._add(Instr(Op.SCATTER, data.dtype, shape, operands, attrs))

    def scan(self, x: Instr, kind: str, dim: int, exclusive: bool = False,
             reverse: bool = False) -> Instr:
        """Running sum/product/log-sum-exp along ``dim`` (TF's Cumsum/Cumprod/
        CumulativeLogsumexp), starting from the identity (0, 1, -inf); ``exclusive``: element k leaves out x[k]; ``reverse``: from the end."""
        if kind not in SCAN_KINDS or not 0 <= dim < x.rank or x.dtype is dt.PRED or \
                (kind == "logsumexp" and not x.dtype.is_float):
            raise IRError(f"scan kind={kind} dim={dim} of {x.dtype.name}{list(x.shape)} is invalid")
        attrs = {"kind": kind, "dim": dim, "exclusive": int(bool(exclusive)), "reverse": int(bool(reverse))}
        return self._add(Instr(Op.SCAN, x.dtype, x.shape, (x,), attrs))

    def top_k(self, x: Instr, k: int, dtype: dt.DType = dt.I32) -> Instr:
        """Indices of the k largest elements along the last dim, largest first; equal
        values (+0 and -0 too) by increasing index; NaN is larger than any number."""
        if x.rank == 0 or not 0 <= k <= x.shape[-1] or dtype not in INDEX_DTYPES or x.dtype is dt.PRED:
            raise IRError(f"top-k k={k} of {x.dtype.name}{list(x.shape)} is invalid")
        return self._add(Instr(Op.TOP_K, dtype, x.shape[:-1] + (k,), (x,), {"k": k}))


def scatter_identity(kind: str, d: dt.DType):
    """What an empty segment holds: 0, 1, or the type's lowest/highest finite value
    (TF's numeric_limits<T>::lowest() and max(), not -inf/inf)."""
    if kind in ("sum", "prod", "sub", "div", "assign"):
        return 0 if kind in ("sum", "sub", "assign") else 1
    if d is dt.BF16:
        import ml_dtypes
        info = ml_dtypes.finfo(ml_dtypes.bfloat16)
    else:
        info = np.finfo(d.numpy()) if d.is_float else np.iinfo(d.numpy())
    value = info.min if kind.startswith("max") else info.max
    return float(value) if d.is_float else int(value)


def _types(values) -> tuple:
    return tuple((v.dtype, tuple(v.shape)) for v in values)
