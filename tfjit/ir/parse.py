"""Reads the IR's text form (see ``text.py``) back into a ``Module``.

``parse_module(module_str(m))`` prints identically to ``m``.  Instructions are
rebuilt through the ``Module`` builders, so shapes, types and attributes are
checked again; an instruction whose printed result disagrees with what its
builder computes is an error.  Every error is an ``IRError`` naming the line.
Called computations come first (``computation NAME { ... }``), each defined
before any block that names it; the last block is the ``module``.
"""
from __future__ import annotations

import re

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import TUPLE, Instr, IRError, Module
from tfjit.ir.ops import CONV3D_OPS, SOLVER_ATTRS, SPECTRAL_ATTRS, TYPED_RESULT, Kind, Op

_HEADER = re.compile(r"(module|computation)\s+([\w.\-]+)\s*\{$")
_INSTR = re.compile(r"%([\w.\-]+)\s*=\s*(\w+\[[\d,\s]*\]|\([\w\[\]\d,\s]*\))\s+([\w\-]+)\((.*)$")
_TYPE = re.compile(r"(\w+)\[([\d,\s]*)\]")
_ROOT = re.compile(r"ROOT\s*\((.*)\)$")
_ATTR = re.compile(r",\s*(\w+)=")


def parse_module(text: str) -> Module:
    """The module ``text`` describes; raises ``IRError`` ("line N: ...") when malformed."""
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    lines = [(n, line) for n, line in lines if line and not line.startswith("//")]
    if not lines:
        raise IRError("line 1: empty module text")
    rest = iter(lines)
    computations: dict = {}
    last = lines[-1][0]
    while True:
        n, line = next(rest, (last + 1, "<end of text>"))
        header = _HEADER.match(line)
        if not header:
            raise IRError(f"line {n}: expected 'module NAME {{', got {line!r}")
        keyword, name = header.groups()
        m = Module(name)
        _block(m, rest, computations, n)
        if keyword == "module":
            break
        if name in computations:
            raise IRError(f"line {n}: computation {name} is defined twice")
        computations[name] = m
    extra = next(rest, None)
    if extra is not None:
        raise IRError(f"line {extra[0]}: text after the module's closing brace")
    return m


def _block(m: Module, rest, computations: dict, n: int) -> None:
    """Instructions up to ``ROOT (...)`` and the closing brace, into ``m``."""
    env: dict[str, Instr] = {}
    for n, line in rest:
        try:
            root = _ROOT.match(line)
            if root:
                m.outputs = []
                for j, item in enumerate(_split(root.group(1))):
                    ref, *view = item.split()
                    m.outputs.append(_ref(env, ref))
                    if view and view[0].startswith("rows="):
                        m.output_rows[j] = _rows_view(view, m.outputs[-1])
                    elif view and view[0].startswith("quantized="):
                        m.quantized_outputs[j] = _quantized_view(view, m.outputs[-1])
                    elif view:
                        m.complex_outputs[j] = _complex_view(view, m.outputs[-1])
                for j, c in m.output_rows.items():
                    if c >= len(m.outputs) or (m.outputs[c].dtype, m.outputs[c].shape) != (dt.I64, ()):
                        raise IRError(f"output {j}: rows={c} does not name an i64[] output")
                break
            if line == "}":
                raise IRError("missing 'ROOT (...)' line")
            _instruction(m, env, line, computations)
        except (IRError, ValueError, KeyError, IndexError, TypeError, OverflowError) as e:
            raise IRError(f"line {n}: {e}") from None
    else:
        raise IRError(f"line {n}: missing 'ROOT (...)' line")
    closing = next(rest, (n + 1, "<end of text>"))
    if closing[1] != "}":
        raise IRError(f"line {closing[0]}: expected '}}', got {closing[1]!r}")


def _complex_view(view: list, x: Instr) -> dt.DType:
    """The complex type of ``complex=c64`` after an output (its real view ``x``)."""
    name = view[0][len("complex="):] if len(view) == 1 and view[0].startswith("complex=") else None
    d = dt.BY_NAME.get(name)
    if d is None or not d.is_complex or x.dtype is not d.part or x.shape[-1:] != (2,):
        raise IRError(f"output {x!r} {' '.join(view)}: expected complex=c64 or complex=c128 after "
                      "a real view (f32/f64, last dim 2) of it")
    return d


def _rows_view(view: list, x: Instr) -> int:
    """The output index of ``rows=c`` after an output of a data-dependent shape."""
    c = view[0][len("rows="):] if len(view) == 1 else ""
    if not c.isdigit() or x.rank < 1:
        raise IRError(f"output {x!r} {' '.join(view)}: expected rows=<output index> after a "
                      "value of rank >= 1")
    return int(c)


def _quantized_view(view: list, x: Instr) -> dt.DType:
    """The quantized type of ``quantized=qint8`` after an output (its storage type ``x``)."""
    name = view[0][len("quantized="):] if len(view) == 1 else None
    d = next((q for q in dt.QUANTIZED if q.name == name), None)
    if d is None or x.dtype is not d.storage:
        raise IRError(f"output {x!r} {' '.join(view)}: expected quantized=<type> after a value of "
                      "that type's storage type (qint8 on i8, quint8 on u8, ...)")
    return d


def _split(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _ref(env: dict, token: str) -> Instr:
    if not token.startswith("%") or token[1:] not in env:
        raise IRError(f"unknown operand {token!r}")
    return env[token[1:]]


def _close_paren(s: str) -> int:
    """Index of the ')' that closes the op's argument list (arguments hold no parens)."""
    k = s.find(")")
    if k < 0:
        raise IRError("missing ')'")
    return k


def _attr_value(s: str):
    s = s.strip()
    if s.startswith("{"):
        if not s.endswith("}"):
            raise IRError(f"unterminated tuple attribute {s!r}")
        items = _split(s[1:-1])
        if items and all(re.fullmatch(r"[A-Za-z_][\w.\-]*", v) for v in items):
            return tuple(items)          # names (of called computations)
        return tuple(int(v) for v in items)
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if not re.fullmatch(r"[\w.\-]+", s):
        raise IRError(f"bad attribute value {s!r}")
    return s


def _attrs(s: str) -> dict:
    if s.strip() == "":
        return {}
    parts = _ATTR.split(s)
    if parts[0].strip():
        raise IRError(f"unexpected text {parts[0].strip()!r} after the operands")
    attrs = {}
    for key, value in zip(parts[1::2], parts[2::2]):
        if key in attrs:
            raise IRError(f"attribute {key} given twice")
        attrs[key] = _attr_value(value)
    return attrs


def _literal(s: str, dtype: dt.DType, shape: tuple) -> np.ndarray:
    s = s.strip()
    items = _split(s[1:-1]) if s.startswith("{") and s.endswith("}") else [s]
    if dtype is dt.PRED:
        if any(v not in ("true", "false") for v in items):
            raise IRError(f"pred constant must be true/false, got {s!r}")
        values = [v == "true" for v in items]
    elif dtype.is_float:
        values = [float(v) for v in items]
    else:
        values = [int(v) for v in items]
    count = int(np.prod(shape, dtype=np.int64))
    if len(values) != count and not (count == 0 and s == "{}"):
        raise IRError(f"constant of shape {list(shape)} needs {count} values, got {len(values)}")
    if dtype.is_int:
        info = np.iinfo(dtype.numpy())
        if any(not info.min <= v <= info.max for v in values):
            raise IRError(f"constant value out of range for {dtype.name}")
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=dtype.numpy()).reshape(shape)


def _type(text: str) -> tuple:
    """(dtype, shape) of ``f32[2,3]``; (TUPLE, ((dtype, shape), ...)) of ``(f32[2], i32[])``."""
    if not text.startswith("("):
        type_name, dims = _TYPE.fullmatch(text).groups()
        if type_name not in dt.BY_NAME or dt.BY_NAME[type_name].is_complex:
            raise IRError(f"unknown element type {type_name!r}")
        return dt.from_name(type_name), tuple(int(d) for d in _split(dims))
    inner = re.sub(r"\s", "", text[1:-1])
    parts = _TYPE.findall(inner)
    if inner != ",".join(f"{t}[{d}]" for t, d in parts):
        raise IRError(f"malformed tuple type {text!r}")
    return TUPLE, tuple(_type(f"{t}[{d}]") for t, d in parts)


def _instruction(m: Module, env: dict, line: str, computations: dict) -> None:
    match = _INSTR.match(line)
    if not match:
        raise IRError(f"expected '%name = type[dims] op(...)', got {line!r}")
    name, type_text, spelling, tail = match.groups()
    if name in env:
        raise IRError(f"%{name} is defined twice")
    dtype, shape = _type(type_text)
    if spelling not in {op.spelling for op in Op}:
        raise IRError(f"unknown op {spelling!r}")
    op = Op.from_spelling(spelling)
    close = _close_paren(tail)
    args, attrs = tail[:close], _attrs(tail[close + 1:])
    if op is Op.CONSTANT:
        instr = m.constant(_literal(args, dtype, shape), dtype)
    elif op is Op.PARAMETER:
        if int(args) != len(m.params):
            raise IRError(f"parameter({args}) out of order: expected parameter({len(m.params)})")
        instr = m.parameter(dtype, shape)
        view = attrs.get("complex")
        if view is not None and (view not in ("c64", "c128") or dt.from_name(view).part is not dtype
                                 or shape[-1:] != (2,)):
            raise IRError(f"parameter({args}): complex={view} needs an f32 (c64) or f64 (c128) "
                          "real view whose last dim is 2")
        quantized = attrs.get("quantized")
        if quantized is not None and next((q.storage for q in dt.QUANTIZED if q.name == quantized),
                                          None) is not dtype:
            raise IRError(f"parameter({args}): quantized={quantized} needs that type's storage type")
    else:
        operands = [_ref(env, t) for t in _split(args)]
        if op.kind is Kind.CONTROL:
            instr = _control(m, op, operands, attrs, computations)
        else:
            instr = _build(m, op, dtype, shape, operands, attrs)
    written = shape if dtype is TUPLE else (dtype, shape)
    built = instr.results if instr.is_tuple else (instr.dtype, instr.shape)
    if (instr.dtype is TUPLE) != (dtype is TUPLE) or built != written:
        yields = ", ".join(f"{d.name}{list(s)}" for d, s in instr.results) \
            if instr.is_tuple else f"{instr.dtype.name}{list(instr.shape)}"
        raise IRError(f"%{name}: {spelling} yields {yields}, not {type_text} as written")
    for key, value in instr.attrs.items():
        if attrs.get(key) != value:
            raise IRError(f"%{name}: attribute {key}={attrs.get(key)!r} disagrees with {value!r}")
    instr.attrs = attrs
    instr.name = name
    env[name] = instr


def _control(m: Module, op: Op, xs: list, attrs: dict, computations: dict) -> Instr:
    def called(name):
        if not isinstance(name, str) or name not in computations:
            raise IRError(f"unknown computation {name!r} (define it before its caller)")
        return computations[name]

    if op is Op.WHILE:
        return m.while_loop(called(attrs.get("condition")), called(attrs.get("body")), xs)
    if op is Op.CONDITIONAL:
        names = attrs.get("branch_computations")
        if not isinstance(names, tuple) or not xs:
            raise IRError("conditional needs a selector and branch_computations={...}")
        return m.conditional(xs[0], [called(c) for c in names], xs[1:])
    if len(xs) != 1 or not isinstance(attrs.get("index"), int):
        raise IRError("get-tuple-element takes one operand and index=N")
    return m.get_tuple_element(xs[0], attrs["index"])


def _build(m: Module, op: Op, dtype: dt.DType, shape: tuple, xs: list, attrs: dict) -> Instr:
    """One instruction through its builder; a builder's no-op shortcut adds it verbatim."""
    if op.arity >= 0 and len(xs) != op.arity:
        raise IRError(f"{op.spelling} takes {op.arity} operands, got {len(xs)}")
    a = attrs.get
    if op is Op.IOTA:
        if not isinstance(a("dim"), int) or not 0 <= a("dim") < max(len(shape), 1):
            raise IRError(f"iota dim {a('dim')!r} invalid for rank {len(shape)}")
        instr = m.iota(dtype, shape, a("dim"))
    elif op.kind is Kind.ELEMENTWISE:
        instr = m.elementwise(op, *xs, dtype=dtype if op in TYPED_RESULT else None)
    elif op is Op.BROADCAST:
        instr = m.broadcast(xs[0], shape, a("dims", ()))
    elif op is Op.RESHAPE:
        instr = m.reshape(xs[0], shape)
    elif op is Op.TRANSPOSE:
        instr = m.transpose(xs[0], a("perm", ()))
    elif op is Op.SLICE:
        instr = m.slice(xs[0], a("starts", ()), shape, a("strides", ()))
    elif op is Op.PAD:
        instr = m.pad(xs[0], xs[1], a("low", ()), a("high", ()))
    elif op is Op.CONCAT:
        instr = m.concat(xs, a("dim"))
    elif op is Op.REDUCE:
        instr = m.reduce(xs[0], a("kind"), a("ndims"))
    elif op is Op.DOT:
        instr = m.dot(xs[0], xs[1], a("transpose_lhs", 0), a("transpose_rhs", 0))
    elif op is Op.CONV:
        instr = m.convolution(xs[0], xs[1], a("strides", ()), a("dilations", ()), a("padding", ()))
    elif op is Op.CONV_BIAS:
        instr = m.convolution_bias(xs[0], xs[1], xs[2], a("strides", ()), a("dilations", ()),
                                   a("padding", ()), a("activation", "none"))
    elif op is Op.QR:
        instr = m.qr(xs[0], a("full_matrices", 0))
    elif op is Op.FFT:
        instr = m.fft(xs[0], a("fft_type", -1), a("fft_length", ()))
    elif op in SOLVER_ATTRS:
        instr = m.matrix_op(op, *xs, lower=a("lower", 0), adjoint=a("adjoint", 0))
    elif op is Op.LU:
        instr = m.lu(xs[0])
    elif op is Op.MATRIX_SOLVE_LS:
        instr = m.solve_ls(xs[0], xs[1], xs[2], a("fast", 0))
    elif op in SPECTRAL_ATTRS:
        instr = m.spectral(op, xs[0], **{k: a(k, 0) for k in SPECTRAL_ATTRS[op]})
    elif op is Op.CONV3D_BIAS:
        instr = m.convolution_3d_bias(xs[0], xs[1], xs[2], a("strides", ()), a("padding", ()),
                                      a("activation", "none"))
    elif op in CONV3D_OPS:
        instr = m.convolution_3d(op, xs[0], xs[1], a("strides", ()), a("padding", ()), shape)
    elif op.kind is Kind.LIBRARY:    # the convolution gradients
        instr = m.conv_backprop(op, xs[0], xs[1], shape, a("strides", ()), a("padding", ()))
    elif op is Op.DYNAMIC_SLICE:
        instr = m.dynamic_slice(xs[0], xs[1:], shape)
    elif op is Op.DYNAMIC_UPDATE_SLICE:
        instr = m.dynamic_update_slice(xs[0], xs[1], xs[2:])
    elif op is Op.GATHER:
        instr = m.gather(xs[0], xs[1], a("axis"), a("batch_dims", 0))
    elif op is Op.SCATTER:
        instr = m.scatter(xs[0], xs[1], a("kind"), shape[-2] if len(shape) >= 2 else -1,
                          xs[2] if len(xs) > 2 else None, a("bounds", "segment"),
                          a("index_shape", ()))
    elif op is Op.SCAN:
        instr = m.scan(xs[0], a("kind"), a("dim"), a("exclusive", 0), a("reverse", 0))
    elif op is Op.TOP_K:
        instr = m.top_k(xs[0], a("k"), dtype)
    else:
        instr = m.argreduce(xs[0], a("kind"), dtype)
    if instr in xs:          # e.g. a reshape to the same shape: builders return the operand
        instr = m._add(Instr(op, dtype, shape, tuple(xs), dict(attrs)))
    return instr
