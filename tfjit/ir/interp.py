"""A numpy reference interpreter of the tfjit IR.

``evaluate`` runs a whole module, ``evaluate_instr`` one instruction (lowering
uses it to fold constants).  The semantics are those of TensorFlow's CPU
executor on x86-64, which the compiled code also implements, including the
corners where plain numpy differs:

* Integer add/sub/mul/neg/abs/pow wrap (two's complement).  Integer division
  and remainder truncate toward zero, ``INT_MIN / -1 == INT_MIN``,
  ``x % -1 == 0``, and a zero divisor raises ``IntegerDivisionByZero``.
* Max/min propagate NaN and keep the left operand on ties (+0 vs -0 too).
* TF's threads run with denormals flushed (MXCSR DAZ+FTZ): float arithmetic,
  comparisons and f32<->f64 conversion read denormal operands as signed zero
  and flush denormal results.  Bit-level ops (neg, abs, select, movement),
  remainder (libm's fmod) and conversions to f16/bf16 keep denormals, as in TF.
* while/conditional run their called modules through ``evaluate`` (only the
  taken branch runs); dynamic-slice/dynamic-update-slice clamp their starts.
* A gather index outside [0, n) (when the result is not empty) and a scatter id
  >= the segment count raise ``IndexOutOfRange`` with TF's message; negative
  scatter ids are dropped.  Scatters and scans combine in input order, rounding
  half precision at every step, as TF's CPU kernels do.
* Shifts clamp their amount to [0, bits - 1] as TF's LeftShift/RightShift do;
  BITCAST reinterprets bits; the ``-libm`` ops, TRUNCATED_NORMAL (interp_rng.py) and
  igamma/betainc/zeta/lgamma/... (Eigen's code, interp_special*.py) call the C library as TF does.
* The runtime-library ops (dot, convolutions, QR, the solvers, the FFTs) are numpy's (interp_linalg.py).
* CONVERT is TF's Cast (interp_cast.py).  For out-of-range float->integer
  values TF's own result depends on whether Eigen takes its vector or scalar
  path; this follows the vector path, TF's for almost every element of a real
  tensor (``interp_cast.float_to_int``), as the codegen does.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, IRError, Module, scatter_identity
from tfjit.ir import interp_linalg, interp_rng, interp_special, interp_special_unary
from tfjit.ir.interp_cast import convert as _convert, flush as _flush
from tfjit.ir.ops import COMPLEX_LIBM, CONV3D_OPS, CONV_BACKPROPS, SOLVER_ATTRS, SPECTRAL_ATTRS, Op


class IntegerDivisionByZero(ValueError):
    """An integer DIV or REM met a zero divisor (TF: InvalidArgumentError)."""


class NegativeIntegerPower(ValueError):
    """An integer POW met a negative exponent (TF: InvalidArgumentError)."""


class IndexOutOfRange(ValueError):
    """A gather index or scatter id outside its dimension (TF: InvalidArgumentError)."""


def evaluate(m: Module, args: list) -> list:
    """Runs ``m`` on ``args`` (one array per parameter, exact dtype and shape; a complex
    parameter takes its real view, ``dtypes.complex_view``, and a complex output is one)."""
    if len(args) != len(m.params):
        raise ValueError(f"module {m.name} takes {len(m.params)} arguments, got {len(args)}")
    env = {}
    for p, a in zip(m.params, args):
        a = np.asarray(a)
        if a.dtype != p.dtype.numpy() or a.shape != p.shape:
            raise ValueError(f"argument {p.index}: expected {p.dtype.name}{list(p.shape)}, "
                             f"got {a.dtype}{list(a.shape)}")
        env[p] = a
    with np.errstate(all="ignore"):
        for instr in m.instrs:
            if instr.op is not Op.PARAMETER:
                env[instr] = evaluate_instr(instr, [env[o] for o in instr.operands])
    return [env[o] for o in m.outputs]


def evaluate_instr(instr: Instr, operand_values: list) -> np.ndarray:
    """The value of ``instr`` given its operands' values."""
    if instr.op is Op.PARAMETER:
        raise ValueError(f"parameter {instr.name} has no value outside evaluate()")
    if instr.op in _CONTROL:
        return _CONTROL[instr.op](instr, operand_values)
    with np.errstate(all="ignore"):
        out = np.asarray(_EVAL[instr.op](instr, [np.asarray(v) for v in operand_values]), order="C")
    if out.dtype != instr.dtype.numpy() or out.shape != instr.shape:
        raise IRError(f"interpreter produced {out.dtype}{list(out.shape)} for {instr.name} = "
                      f"{instr.dtype.name}{list(instr.shape)} {instr.op.spelling}")
    return out


# -- helpers ----------------------------------------------------------------

def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _fpu(fn):
    """An op the FPU computes: denormal operands read as zero, results flushed."""
    return lambda instr, vals: _flush(np.asarray(fn(*[_flush(v) for v in vals])))


def _fpu_instr(fn):
    """Like ``_fpu`` for an op that also reads its instruction's attributes."""
    return lambda instr, vals: _flush(np.asarray(fn(instr, *[_flush(v) for v in vals])))


def _in_f64(fn):
    """A float function computed in f64 and rounded once to the operand's type."""
    return lambda x: np.asarray(fn(x.astype(np.float64))).astype(x.dtype)


def _libm_on_f64(fn, name: str):
    """fn as the FPU computes it (DAZ/FTZ), except on f64: the C library's ``name`` of
    the raw operand, unflushed, as TF's float64 kernel and codegen call it
    (codegen/elemental.py's ``_SCALAR_F64``)."""
    fpu = _fpu(fn)
    return lambda instr, vals: (interp_rng.libm(name, vals[0]) if vals[0].dtype == np.float64
                                else fpu(instr, vals))


def _sign(x):
    if x.dtype.kind != "f":
        return np.sign(x)
    one = x.dtype.type(1)
    return np.where(np.isnan(x), x, np.where(x > 0, one, np.where(x < 0, -one, x.dtype.type(0))))


def _logistic(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x):
    threshold = x.dtype.type(np.log(np.finfo(x.dtype).eps) + 2)
    return np.where(x > -threshold, x, np.where(x < threshold, np.exp(x), np.log1p(np.exp(x))))


def _erf(x):
    y = np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)
    return np.where(np.isinf(x), np.nan, y) if x.dtype == np.float64 else y   # TF (Eigen): f64 erf(+-inf) is NaN


def _rounding(fn):
    return lambda x: fn(x) if x.dtype.kind == "f" else x


def _int_div_operands(a, b):
    if np.any(b == 0):
        raise IntegerDivisionByZero("Integer division by zero")
    minus_one = (b == -1) if b.dtype.kind == "i" else np.zeros(b.shape, bool)
    return minus_one, np.where(minus_one, b.dtype.type(1), b)


def _div(a, b):
    if a.dtype.kind == "f":
        return np.divide(a, b)
    minus_one, safe = _int_div_operands(a, b)
    exact = a - np.fmod(a, safe)            # a multiple of safe with |exact| <= |a|
    return np.where(minus_one, np.negative(a), exact // safe)


def _rem(a, b):
    if a.dtype.kind == "f":         # TF: a denormal divisor reads as 0 (NaN), a denormal dividend survives
        return np.fmod(a, _flush(b))
    minus_one, safe = _int_div_operands(a, b)
    return np.where(minus_one, a.dtype.type(0), np.fmod(a, safe))


def _pow(a, b):
    if a.dtype.kind == "f":
        return np.power(a, b)
    if np.any(b < 0):
        raise NegativeIntegerPower("Integers to negative integer powers are not allowed")
    result, base, e = np.ones_like(a), a, b
    while np.any(e):
        result = np.where((e & 1).astype(bool), result * base, result)
        base, e = base * base, e >> 1
    return result


def _fma(x, y, z):
    """``x * y + z`` rounded once to f32 (the IR has FMA for f32 only).  The product of two
    f32s is exact in f64; the f64 sum ``s`` is off the exact sum by ``err`` (TwoSum, exact),
    and moving ``s`` one f64 step toward ``err`` before rounding to f32 settles the one case
    where the two roundings could differ, ``s`` on a tie between two f32s."""
    with np.errstate(invalid="ignore", over="ignore"):      # inf * 0, inf - inf: NaN, as TF
        p = x.astype(np.float64) * y.astype(np.float64)
        c = z.astype(np.float64)
        s = p + c
        back = s - p
        err = (p - (s - back)) + (c - back)
        nudge = np.isfinite(err) & (err != 0)
        s = np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


def _extremum(greater_or_equal):
    def run(a, b):
        r = np.where(greater_or_equal(a, b), a, b)
        if a.dtype.kind == "f":
            r = np.where(np.isnan(a), a, np.where(np.isnan(b), b, r))
        return r
    return run


def _logical_or_bitwise(logical, bitwise):
    return lambda *xs: logical(*xs) if xs[0].dtype == np.bool_ else bitwise(*xs)


# -- reductions -------------------------------------------------------------

def _reduce(instr, vals):
    x, kind = _flush(vals[0]), instr.attrs["kind"]
    axes = tuple(range(x.ndim - instr.attrs["ndims"], x.ndim))
    if kind == "sum":       # from +0, like TF's reducer: a sum of -0.0s is +0.0
        return _flush(np.sum(x, axis=axes, dtype=x.dtype, initial=0))
    if kind == "prod":
        return _flush(np.prod(x, axis=axes, dtype=x.dtype))
    if kind == "max":
        return np.max(x, axis=axes, initial=_lowest(x.dtype))
    if kind == "maxnum":
        return np.fmax.reduce(x, axis=axes, initial=_lowest(x.dtype))
    if kind == "min":
        return np.min(x, axis=axes, initial=_highest(x.dtype))
    if kind == "and":
        return np.all(x, axis=axes) if x.dtype == np.bool_ else np.bitwise_and.reduce(x, axis=axes)
    return np.any(x, axis=axes) if x.dtype == np.bool_ else np.bitwise_or.reduce(x, axis=axes)


def _argreduce(instr, vals):
    """TF's rule: the best starts at the lowest (highest) finite value with index 0 and
    only a strictly better element replaces it, so NaN, -inf and the lowest value
    itself never win and ties keep the first: NaN and what lies beyond the start
    value become the start value, which then wins only where nothing beats it (at 0)."""
    x, is_max = _flush(vals[0]), instr.attrs["kind"] == "max"
    if instr.operands[0].dtype.is_float:
        info = ml_dtypes.finfo(x.dtype)
        start = x.dtype.type(info.min if is_max else info.max)
        beyond = (x < start) if is_max else (x > start)
        x = np.where(np.isnan(x) | beyond, start, x)
    return (np.argmax if is_max else np.argmin)(x, axis=-1).astype(instr.dtype.numpy())


# -- leaves and data movement -----------------------------------------------

def _iota(instr, vals):
    d = instr.attrs["dim"]
    line = np.arange(instr.shape[d]).astype(instr.dtype.numpy())
    shape = [1] * instr.rank
    shape[d] = instr.shape[d]
    return np.broadcast_to(line.reshape(shape), instr.shape)


def _broadcast(instr, vals):
    x, shape = vals[0], [1] * instr.rank
    for operand_dim, result_dim in enumerate(instr.attrs["dims"]):
        shape[result_dim] = x.shape[operand_dim]
    return np.broadcast_to(x.reshape(shape), instr.shape)


def _slice(instr, vals):
    x = vals[0]
    for d, (start, stride, n) in enumerate(zip(instr.attrs["starts"], instr.attrs["strides"], instr.shape)):
        x = np.take(x, start + np.arange(n, dtype=np.int64) * stride, axis=d)
    return x


def _pad(instr, vals):
    x, value = vals
    out = np.full(instr.shape, value, dtype=x.dtype)
    out[tuple(slice(lo, lo + n) for lo, n in zip(instr.attrs["low"], x.shape))] = x
    return out


# -- bit manipulation ---------------------------------------------------------

def _unsigned(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _shift_amount(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """TF's clamp of the amount to [0, bits - 1], in the unsigned type of x."""
    top = 8 * x.dtype.itemsize - 1
    wide = y.astype(np.int64) if y.dtype.kind == "i" else np.minimum(y, top).astype(np.int64)
    return np.clip(wide, 0, top).astype(_unsigned(x).dtype)


def _shift(direction: str):
    def run(x, y):
        n = _shift_amount(x, y)
        if direction == "left":
            return (_unsigned(x) << n).view(x.dtype)
        if direction == "logical":
            return (_unsigned(x) >> n).view(x.dtype)
        signed = np.dtype(f"i{x.dtype.itemsize}")
        return (x.view(signed) >> n.astype(signed)).view(x.dtype)
    return run


def _bitcast(instr, vals):
    return np.array(vals[0], order="C").view(instr.dtype.numpy())      # (0-d stays 0-d)


def _xor(x, y):
    return np.logical_xor(x, y) if x.dtype == np.bool_ else np.bitwise_xor(x, y)


def _elementwise(fn):
    return lambda instr, vals: fn(*vals)


# -- run-time indices and control flow ---------------------------------------

def _clamped_starts(x: np.ndarray, starts, sizes) -> tuple:
    """HLO's rule: each start is clamped so that the window lies inside ``x``."""
    return tuple(min(max(int(s), 0), d - n) for s, d, n in zip(starts, x.shape, sizes))


def _dynamic_slice(instr, vals):
    x = vals[0]
    starts = _clamped_starts(x, vals[1:], instr.shape)
    return x[tuple(slice(s, s + n) for s, n in zip(starts, instr.shape))]


def _dynamic_update_slice(instr, vals):
    x, update = vals[0], vals[1]
    out = np.array(x)
    starts = _clamped_starts(x, vals[2:], update.shape)
    out[tuple(slice(s, s + n) for s, n in zip(starts, update.shape))] = update
    return out


def _while(instr, vals):
    cond, body = instr.called
    state = [np.asarray(v) for v in vals]
    while bool(evaluate(cond, state)[0]):
        state = evaluate(body, state)
    return tuple(state)


def _conditional(instr, vals):
    selector, args = np.asarray(vals[0]), [np.asarray(v) for v in vals[1:]]
    branches = instr.called
    if selector.dtype == np.bool_:
        branch = branches[0] if bool(selector) else branches[1]
    else:
        k = int(selector)
        branch = branches[k] if 0 <= k < len(branches) else branches[-1]
    return tuple(evaluate(branch, args))


_CONTROL = {
    Op.WHILE: _while,
    Op.CONDITIONAL: _conditional,
    Op.GET_TUPLE_ELEMENT: lambda instr, vals: vals[0][instr.attrs["index"]],
}

# -- data-dependent indexing ---------------------------------------------------------

def _position(shape: tuple, flat: int) -> str:
    return "[" + ",".join(str(int(v)) for v in np.unravel_index(flat, shape)) + "]" if shape else ""


def _gather(instr, vals):
    """An index outside [0, n) is an error when the result is not empty (as TF checks)."""
    x, ind = vals
    axis, b = instr.attrs["axis"], instr.attrs["batch_dims"]
    n = x.shape[axis]
    bad = (ind < 0) | (ind >= n)
    if instr.size and bad.any():
        flat = int(np.flatnonzero(bad)[0])
        raise IndexOutOfRange(f"indices{_position(ind.shape, flat)} = {ind.reshape(-1)[flat]} "
                              f"is not in [0, {n})")
    if instr.size == 0:
        return np.zeros(instr.shape, x.dtype)
    batch = math.prod(x.shape[:b])
    xs, ids = x.reshape((batch,) + x.shape[b:]), ind.reshape((batch,) + ind.shape[b:])
    parts = [np.take(xs[k], ids[k].astype(np.int64), axis=axis - b) for k in range(batch)]
    return np.stack(parts).reshape(instr.shape)


def _scatter(instr, vals):
    """Rows combined one at a time in input order (TF's CPU loop), from init or the identity."""
    data, ids = vals[:2]
    segments = instr.shape[-2]
    by_index = instr.attrs.get("bounds") == "index"
    bad = (ids >= segments) | ((ids < 0) if by_index else False)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        if by_index:
            shape = instr.attrs["index_shape"]
            where = f"[{','.join(map(str, np.unravel_index(j, shape)))}]" if shape else ""
            raise IndexOutOfRange(f"indices{where} = {ids[j]} is not in [0, {segments})")
        raise IndexOutOfRange(f"segment_ids[{j}] = {ids[j]} is out of range [0, {segments})")
    data, kind = _flush(data), instr.attrs["kind"]
    if kind == "div" and (data == 0).any():
        raise IndexOutOfRange("updates must not contain 0")
    out = _flush(vals[2]).copy() if len(vals) > 2 else \
        np.full(instr.shape, scatter_identity(kind, instr.dtype), data.dtype)
    combine = _SCATTER_COMBINE[kind]
    for j in np.flatnonzero(ids >= 0):      # [..., ids[j], :]: rank 3 is A scatters side by side
        out[..., ids[j], :] = _flush(combine(out[..., ids[j], :], data[..., j, :]))
    return out


_SCATTER_COMBINE = {     # max/min as TF's CPU kernel: acc where strictly greater (less), else v
    "sum": np.add, "prod": np.multiply,
    "max": lambda acc, v: np.where(acc > v, acc, v), "min": lambda acc, v: np.where(acc < v, acc, v),
    "sub": np.subtract, "div": _div, "assign": lambda acc, v: v,
    "max_acc": lambda acc, v: np.where(acc < v, v, acc), "min_acc": lambda acc, v: np.where(v < acc, v, acc),
}


def _log_add_exp(acc, v):
    """TF's CumulativeLogsumexp step: max + log1p(exp(min - max)), or max where it is -inf,
    with Eigen's max/min (``v if acc < v else acc``).  Halves in float32, rounded per step."""
    a, b = (x.astype(np.float64 if acc.dtype == np.float64 else np.float32) for x in (acc, v))
    with np.errstate(invalid="ignore", over="ignore"):
        hi, lo = np.where(a < b, b, a), np.where(b < a, b, a)
        return np.where(hi == -np.inf, hi, hi + np.log1p(np.exp(lo - hi))).astype(acc.dtype)


def _scan(instr, vals):
    a = instr.attrs
    x = np.moveaxis(_flush(vals[0]), a["dim"], 0)
    if a["reverse"]:
        x = x[::-1]
    combine = {"sum": np.add, "prod": np.multiply, "logsumexp": _log_add_exp}[a["kind"]]
    acc = np.full(x.shape[1:], {"sum": 0, "prod": 1, "logsumexp": -np.inf}[a["kind"]], x.dtype)
    out = np.empty_like(x)
    for k in range(x.shape[0]):
        if a["exclusive"]:
            out[k], acc = acc, _flush(combine(acc, x[k]))
        else:
            acc = _flush(combine(acc, x[k]))
            out[k] = acc
    if a["reverse"]:
        out = out[::-1]
    return np.moveaxis(out, 0, a["dim"])


def _top_k(instr, vals):
    """A stable descending order: sorting the reversed row ascending (numpy puts NaN
    last and keeps -0 == +0) and reading it backwards ranks NaN first and breaks ties
    by increasing index.  Denormals compare as zero (DAZ)."""
    x = _flush(vals[0])
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        x = x.astype(np.float64)
    n = x.shape[-1]
    order = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    return (n - 1 - order[..., :instr.attrs["k"]]).astype(instr.dtype.numpy())


_UNARY_FPU = {
    Op.SIGN: _sign, Op.SQRT: np.sqrt, Op.EXP: np.exp, Op.EXPM1: np.expm1, Op.LOG: np.log,
    Op.LOG1P: np.log1p, Op.SIN: np.sin, Op.COS: np.cos, Op.TANH: np.tanh,
    Op.RSQRT: lambda x: x.dtype.type(1) / np.sqrt(x),
    Op.LOGISTIC: _in_f64(_logistic), Op.SOFTPLUS: _softplus,
    Op.ERF: _erf, Op.ATAN: np.arctan, Op.ATANH: np.arctanh,
    Op.FLOOR: _rounding(np.floor), Op.CEIL: _rounding(np.ceil), Op.ROUND_EVEN: _rounding(np.rint),
}
_BINARY_FPU = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: _div,
    Op.MAX: _extremum(np.greater_equal), Op.MIN: _extremum(np.less_equal), Op.POW: _pow,
    Op.ATAN2: np.arctan2, Op.EQ: np.equal, Op.NE: np.not_equal, Op.LT: np.less,
    Op.LE: np.less_equal, Op.GT: np.greater, Op.GE: np.greater_equal,
}
_EXACT = {     # bit operations and fmod (see _rem): no DAZ/FTZ
    Op.REM: _rem, Op.NEG: np.negative, Op.ABS: np.abs, Op.IS_NAN: np.isnan, Op.IS_INF: np.isinf,
    Op.IS_FINITE: np.isfinite, Op.SELECT: np.where,
    Op.NOT: _logical_or_bitwise(np.logical_not, np.invert),
    Op.AND: _logical_or_bitwise(np.logical_and, np.bitwise_and),
    Op.OR: _logical_or_bitwise(np.logical_or, np.bitwise_or),
    Op.XOR: _xor, Op.SHL: _shift("left"), Op.SHR_LOGICAL: _shift("logical"),
    Op.SHR_ARITH: _shift("arithmetic"),
    Op.LOG_LIBM: lambda x: interp_rng.libm("log", x), Op.SIN_LIBM: lambda x: interp_rng.libm("sin", x),
    Op.COS_LIBM: lambda x: interp_rng.libm("cos", x),
    Op.EXPM1_LIBM: lambda x: interp_rng.libm("expm1", x),
    **{op: (lambda name, part: lambda x, y: interp_rng.complex_libm(name, part, x, y))(*fp)
       for op, fp in COMPLEX_LIBM.items()},
    **{op: (lambda x, name=op.spelling: interp_rng.libm(name, x))
       for op in (Op.TAN, Op.SINH, Op.COSH, Op.ASINH, Op.ACOSH)},
}

_EVAL = {
    Op.CONSTANT: lambda instr, vals: instr.value,
    Op.IOTA: _iota,
    Op.CONVERT: lambda instr, vals: _convert(vals[0], instr.operands[0].dtype, instr.dtype),
    Op.BITCAST: _bitcast,
    Op.TRUNCATED_NORMAL: lambda instr, vals: interp_rng.truncated_normal(vals, instr.dtype.numpy()),
    Op.FMA: _fpu(_fma),
    **{op: _fpu(fn) for op, fn in {**_UNARY_FPU, **_BINARY_FPU, **interp_special.FUNCTIONS,
                                 **interp_special_unary.FUNCTIONS}.items()},
    # the C library reads the operand's bits: a denormal is no zero to it, whatever DAZ says
    **{op: (lambda fn: lambda instr, vals: _flush(np.asarray(fn(*vals))))(fn)
       for op, fn in interp_special_unary.RAW_OPERAND.items()},
    **{op: _elementwise(fn) for op, fn in _EXACT.items()},
    Op.ASIN: _libm_on_f64(np.arcsin, "asin"), Op.ACOS: _libm_on_f64(np.arccos, "acos"),
    Op.BROADCAST: _broadcast,
    Op.RESHAPE: lambda instr, vals: vals[0].reshape(instr.shape),
    Op.TRANSPOSE: lambda instr, vals: np.transpose(vals[0], instr.attrs["perm"]),
    Op.SLICE: _slice,
    Op.PAD: _pad,
    Op.CONCAT: lambda instr, vals: np.concatenate(vals, axis=instr.attrs["dim"]),
    Op.REDUCE: _reduce,
    Op.ARGREDUCE: _argreduce,
    Op.DOT: _fpu_instr(lambda instr, lhs, rhs: interp_linalg.dot(lhs, rhs, instr.attrs["transpose_lhs"],
                                                                 instr.attrs["transpose_rhs"])),
    Op.GATHER: _gather,
    Op.SCATTER: _scatter,
    Op.SCAN: _scan,
    Op.TOP_K: _top_k,
    Op.CONV: _fpu_instr(lambda instr, x, w: interp_linalg.conv(x, w, instr.attrs["strides"],
                                                               instr.attrs["dilations"], instr.attrs["padding"])),
    **{op: _fpu_instr(interp_linalg.conv_backprop) for op in CONV_BACKPROPS},
    **{op: _fpu_instr(interp_linalg.conv3d) for op in CONV3D_OPS},
    Op.QR: _fpu_instr(interp_linalg.qr),
    Op.FFT: _fpu_instr(interp_linalg.fft),
    **{op: _fpu_instr(interp_linalg.solver) for op in SOLVER_ATTRS},
    **{op: _fpu_instr(interp_linalg.spectral) for op in SPECTRAL_ATTRS},
    Op.MATRIX_SOLVE_LS: _fpu_instr(interp_linalg.solve_ls),
    Op.LU: _fpu_instr(interp_linalg.lu),
}
def _conv_bias(instr, vals):
    """activation(convolution + bias): the entries of the instructions it replaces
    (passes/epilogue.py), so each step rounds and flushes as they do; a bf16 one in f32,
    rounded once at the end (oneDNN's fused bf16 kernel, as the runtime)."""
    if instr.dtype is dt.BF16:
        f32 = Instr(instr.op, dt.F32, instr.shape, instr.operands, instr.attrs)
        wide = _conv_bias(f32, [np.asarray(v, np.float32) for v in vals])
        return wide.astype(instr.dtype.numpy())
    x, w, bias = vals
    conv = Instr(Op.CONV3D if instr.op is Op.CONV3D_BIAS else Op.CONV, instr.dtype, instr.shape,
                 instr.operands[:2], instr.attrs)
    y = _EVAL[Op.ADD](instr, [_EVAL[conv.op](conv, [x, w]), bias])
    if instr.attrs["activation"] != "none":
        y = _EVAL[Op.MAX](instr, [y, np.zeros((), y.dtype)])
    if instr.attrs["activation"] == "relu6":
        y = _EVAL[Op.MIN](instr, [y, np.asarray(6, y.dtype)])
    return y


_EVAL[Op.CONV_BIAS] = _EVAL[Op.CONV3D_BIAS] = _conv_bias
_EVAL[Op.DYNAMIC_SLICE] = _dynamic_slice
_EVAL[Op.DYNAMIC_UPDATE_SLICE] = _dynamic_update_slice
_MISSING = set(Op) - set(_EVAL) - set(_CONTROL) - {Op.PARAMETER}
assert not _MISSING, f"interpreter lacks {_MISSING}"
