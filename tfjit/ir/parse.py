"""Reads the IR's text form (see ``text.py``) back into a ``Module``.

``parse_module(module_str(m))`` prints identically to ``m``.  Instructions are
rebuilt through the ``Module`` builders, so shapes, types and attributes are
checked again; an instruction whose printed result disagrees with what its
builder computes is an error.  Every error is an ``IRError`` naming the line.
"""
from __future__ import annotations

import re

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, IRError, Module
from tfjit.ir.ops import TYPED_RESULT, Kind, Op

_HEADER = re.compile(r"module\s+([\w.\-]+)\s*\{$")
_INSTR = re.compile(r"%([\w.\-]+)\s*=\s*(\w+)\[([\d,\s]*)\]\s+([\w\-]+)\((.*)$")
_ROOT = re.compile(r"ROOT\s*\((.*)\)$")
_ATTR = re.compile(r",\s*(\w+)=")


def parse_module(text: str) -> Module:
    """The module ``text`` describes; raises ``IRError`` ("line N: ...") when malformed."""
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    lines = [(n, line) for n, line in lines if line and not line.startswith("//")]
    if not lines:
        raise IRError("line 1: empty module text")
    n, line = lines[0]
    header = _HEADER.match(line)
    if not header:
        raise IRError(f"line {n}: expected 'module NAME {{', got {line!r}")
    m = Module(header.group(1))
    env: dict[str, Instr] = {}
    rest = iter(lines[1:])
    for n, line in rest:
        try:
            root = _ROOT.match(line)
            if root:
                m.outputs = [_ref(env, r) for r in _split(root.group(1))]
                break
            if line == "}":
                raise IRError("missing 'ROOT (...)' line")
            _instruction(m, env, line)
        except (IRError, ValueError, KeyError, IndexError, TypeError, OverflowError) as e:
            raise IRError(f"line {n}: {e}") from None
    else:
        raise IRError(f"line {n}: missing 'ROOT (...)' line")
    closing = next(rest, (n + 1, "<end of text>"))
    if closing[1] != "}":
        raise IRError(f"line {closing[0]}: expected '}}', got {closing[1]!r}")
    extra = next(rest, None)
    if extra is not None:
        raise IRError(f"line {extra[0]}: text after the module's closing brace")
    return m


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
        return tuple(int(v) for v in _split(s[1:-1]))
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


def _instruction(m: Module, env: dict, line: str) -> None:
    match = _INSTR.match(line)
    if not match:
        raise IRError(f"expected '%name = type[dims] op(...)', got {line!r}")
    name, type_name, dims, spelling, tail = match.groups()
    if name in env:
        raise IRError(f"%{name} is defined twice")
    if type_name not in dt.BY_NAME:
        raise IRError(f"unknown element type {type_name!r}")
    if spelling not in {op.spelling for op in Op}:
        raise IRError(f"unknown op {spelling!r}")
    dtype, op = dt.from_name(type_name), Op.from_spelling(spelling)
    shape = tuple(int(d) for d in _split(dims))
    close = _close_paren(tail)
    args, attrs = tail[:close], _attrs(tail[close + 1:])
    if op is Op.CONSTANT:
        instr = m.constant(_literal(args, dtype, shape), dtype)
    elif op is Op.PARAMETER:
        if int(args) != len(m.params):
            raise IRError(f"parameter({args}) out of order: expected parameter({len(m.params)})")
        instr = m.parameter(dtype, shape)
    else:
        operands = [_ref(env, t) for t in _split(args)]
        instr = _build(m, op, dtype, shape, operands, attrs)
    if instr.dtype is not dtype or instr.shape != shape:
        raise IRError(f"%{name}: {spelling} yields {instr.dtype.name}{list(instr.shape)}, "
                      f"not {dtype.name}{list(shape)} as written")
    for key, value in instr.attrs.items():
        if attrs.get(key) != value:
            raise IRError(f"%{name}: attribute {key}={attrs.get(key)!r} disagrees with {value!r}")
    instr.attrs = attrs
    instr.name = name
    env[name] = instr


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
    else:
        instr = m.argreduce(xs[0], a("kind"), dtype)
    if instr in xs:          # e.g. a reshape to the same shape: builders return the operand
        instr = m._add(Instr(op, dtype, shape, tuple(xs), dict(attrs)))
    return instr
