"""Scalar semantics of the IR's elementwise ops, as LLVM instructions.

Each function takes register values (see ``llvm_types.value_type``) and returns
one.  Semantics are TensorFlow's CPU kernels', without undefined LLVM
behaviour: integer division checks its divisor (TF raises "Integer division by
zero"; INT_MIN / -1 wraps), casts from float to int reproduce what TF's x86
kernels produce for NaN and out-of-range values using saturating conversions
and selects, and Maximum/Minimum propagate NaN and keep the left operand on
ties, as TF does.  Shift amounts are clamped to [0, bits - 1] (TF's rule, and no
LLVM poison).  The ``-libm`` ops call the C library itself (declared
``nobuiltin`` so LLVM never folds or rewrites them with its own math); the
truncated-normal op is a loop (codegen/random.py); igamma, betainc, zeta, ... are
calls to functions of their own (codegen/special.py).
"""
from __future__ import annotations

from llvmlite import ir

from tfjit import dtypes as dt
from tfjit.codegen import random, special
from tfjit.codegen.llvm_types import F32, I1, I16, I32, I64, const, intrinsic, value_type
from tfjit.ir.ops import COMPLEX_LIBM, SPECIAL, Op

MESSAGES = ("Integer division by zero", "Integers to negative integer powers are not allowed")
DIV_BY_ZERO, NEGATIVE_POWER = 1, 2

_FCMP = {Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}
_MATH = {Op.EXP: "exp", Op.EXPM1: "expm1", Op.LOG: "log", Op.LOG1P: "log1p", Op.SIN: "sin",
         Op.COS: "cos", Op.TANH: "tanh", Op.LOGISTIC: "sigmoid", Op.ERF: "erf",
         Op.SOFTPLUS: "softplus", Op.ATAN2: "atan2", Op.ASIN: "asin", Op.ACOS: "acos",
         Op.ATAN: "atan", Op.ATANH: "atanh"}
# TF's float64 kernels call the C library for these (Eigen vectorises only float32's),
# and so does mathlib: without DAZ the result is TF's bit for bit, denormals included
_SCALAR_F64 = frozenset({Op.ASIN, Op.ACOS})
# No DAZ needed: a denormal argument gives the same result as a zero of its sign (exp 1,
# sigmoid 0.5, softplus ln 2, all exactly), so reading it as zero changes nothing and
# would cost exp's loop 4 of its ~30 instructions per vector (tests/test_mathlib.py checks
# the equality; tests/test_ops.py's special values compare denormals with TF).
_NO_DAZ_NEEDED = frozenset({Op.EXP, Op.LOGISTIC, Op.SOFTPLUS})
# no DAZ on these operands: TF passes denormals to the C library too (tan(1e-40) is 1e-40)
_LIBM = {Op.LOG_LIBM: "log", Op.SIN_LIBM: "sin", Op.COS_LIBM: "cos", Op.EXPM1_LIBM: "expm1",
         Op.TAN: "tan", Op.SINH: "sinh", Op.COSH: "cosh", Op.ASINH: "asinh", Op.ACOSH: "acosh"}
_SHIFT = {Op.SHL: "shl", Op.SHR_LOGICAL: "lshr", Op.SHR_ARITH: "ashr"}
_FINTRINSIC = {Op.SQRT: "sqrt", Op.FLOOR: "floor", Op.CEIL: "ceil", Op.ROUND_EVEN: "roundeven",
               Op.ABS: "fabs"}


class Elemental:
    """Emits one elementwise op; ``raise_status(code, cond)`` records a runtime error."""

    def __init__(self, b: ir.IRBuilder, math, raise_status):
        self.b = b
        self.math = math                  # math(b, name, args) -> value (target-specific)
        self.raise_status = raise_status
        self._sincos: dict = {}           # (argument, block) -> (sin, cos) from one sincos call

    def emit(self, op: Op, in_dtype: dt.DType, out_dtype: dt.DType, args: list):
        b = self.b
        if op is Op.CONVERT:
            return self.convert(args[0], in_dtype, out_dtype)
        if op is Op.BITCAST:
            return self.bitcast(args[0], in_dtype, out_dtype)
        if op is Op.TRUNCATED_NORMAL:
            return random.truncated_normal(b, value_type(out_dtype), args, self.libm)
        if op in SPECIAL:
            return special.call(b, op, args)
        if op is Op.SELECT:
            return b.select(*args)
        if op is Op.FMA:
            return b.fma(*args)
        if op in _FCMP:
            return self._compare(op, in_dtype, *args)
        if in_dtype.is_float:
            return self._float(op, in_dtype, args)
        return self._integer(op, in_dtype, args)

    # -- floats ---------------------------------------------------------------
    def _float(self, op, d, args):
        b, t = self.b, value_type(d)
        x = args[0]
        y = args[1] if len(args) > 1 else None
        if op is Op.ADD:
            return b.fadd(x, y)
        if op is Op.SUB:
            return b.fsub(x, y)
        if op is Op.MUL:
            return b.fmul(x, y)
        if op is Op.DIV:
            return b.fdiv(x, y)
        if op is Op.REM:
            return b.frem(x, y)
        if op in (Op.MAX, Op.MIN):
            keep_lhs = b.fcmp_ordered(">=" if op is Op.MAX else "<=", x, y)
            r = b.select(keep_lhs, x, y)
            return b.select(b.fcmp_unordered("uno", x, y), b.fadd(x, y), r)
        if op is Op.POW:
            return self.math(b, "pow", [self._daz(x), self._daz(y)])
        if op in _MATH:
            if op in _NO_DAZ_NEEDED or (op in _SCALAR_F64 and t == ir.DoubleType()):
                return self.math(b, _MATH[op], args)
            return self.math(b, _MATH[op], [self._daz(a) for a in args])
        if op in _FINTRINSIC:
            return intrinsic(b, _FINTRINSIC[op], t, [x])
        if op in _LIBM:
            return self.libm(_LIBM[op], x)
        if op in COMPLEX_LIBM:
            return self.complex_libm(*COMPLEX_LIBM[op], x, y)
        if op is Op.RSQRT:
            return b.fdiv(ir.Constant(t, 1.0), intrinsic(b, "sqrt", t, [x]))
        if op is Op.NEG:
            return b.fneg(x)
        if op is Op.SIGN:
            one, zero = ir.Constant(t, 1.0), ir.Constant(t, 0.0)
            s = b.select(b.fcmp_ordered(">", x, zero), one,
                         b.select(b.fcmp_ordered("<", x, zero), ir.Constant(t, -1.0), zero))
            return b.select(b.fcmp_unordered("uno", x, x), x, s)
        if op is Op.IS_NAN:
            return b.fcmp_unordered("uno", x, x)
        if op is Op.IS_INF:
            return b.fcmp_ordered("==", intrinsic(b, "fabs", t, [x]), ir.Constant(t, float("inf")))
        if op is Op.IS_FINITE:
            return b.fcmp_ordered("<", intrinsic(b, "fabs", t, [x]), ir.Constant(t, float("inf")))
        raise NotImplementedError(f"{op.spelling} on {d}")

    def libm(self, name: str, x):
        """The C library's ``name`` (logf for a float, log for a double) of x.

        sin and cos of one value in one block share a call to sincosf/sincos (what
        TF's Box–Muller calls): glibc's sincos gives sin's and cos's bits exactly
        (checked for all 2**23 float32 angles Box–Muller makes and 2e7 float64 ones)."""
        if name in ("sin", "cos"):
            return self._sin_cos(x)[name == "cos"]
        symbol = name + ("f" if x.type == F32 else "")
        return self.b.call(self._libm_decl(symbol, ir.FunctionType(x.type, [x.type]), pure=True), [x])

    def complex_libm(self, name: str, part: int, x, y):
        """Part ``part`` of the C library's complex ``name`` (csinf for floats, csin for
        doubles) of x + iy, with the x86-64 C ABI's types, as clang declares them: a
        float _Complex is one <2 x float> argument and result, a double _Complex two
        double arguments and a {double, double} result.  The two parts' calls are one
        call after LLVM's CSE (the function is declared readnone, as the real libm's)."""
        b = self.b
        if x.type == F32:
            pair = ir.VectorType(F32, 2)
            fn = self._libm_decl(f"c{name}f", ir.FunctionType(pair, [pair]), pure=True)
            z = b.insert_element(b.insert_element(ir.Constant(pair, None), x, ir.Constant(I32, 0)),
                                 y, ir.Constant(I32, 1))
            return b.extract_element(b.call(fn, [z]), ir.Constant(I32, part))
        pair = ir.LiteralStructType([x.type, x.type])
        fn = self._libm_decl(f"c{name}", ir.FunctionType(pair, [x.type, x.type]), pure=True)
        return b.extract_value(b.call(fn, [x, y]), part)

    def _libm_decl(self, symbol: str, fnty, pure: bool):
        fn = self.b.module.globals.get(symbol)
        if fn is None:
            fn = ir.Function(self.b.module, fnty, name=symbol)
        # never folded or rewritten by LLVM's own math (also when mathlib declared it first)
        for attr in ("nobuiltin", "nounwind") + (("readnone",) if pure else ("argmemonly",)):
            fn.attributes.add(attr)
        return fn

    def _sin_cos(self, x):
        b, key = self.b, (x, self.b.block)
        if key not in self._sincos:
            symbol = "sincosf" if x.type == F32 else "sincos"
            fn = self._libm_decl(symbol, ir.FunctionType(ir.VoidType(), [x.type, ir.PointerType(), ir.PointerType()]),
                                 pure=False)
            entry = b.function.entry_basic_block
            with b.goto_block(entry):
                b.position_at_start(entry)
                slots = [b.alloca(x.type), b.alloca(x.type)]
            b.call(fn, [x] + slots)
            self._sincos[key] = tuple(b.load(p, typ=x.type) for p in slots)
        return self._sincos[key]

    def _daz(self, x):
        """x with a denormal read as signed zero, as TF's FPU code reads it (MXCSR
        DAZ).  Math functions get this explicitly: libm and mathlib classify their
        argument with integer operations, which DAZ does not affect (libm's log
        of -1e-310 would be NaN where TF's is -inf)."""
        b, t = self.b, x.type
        tiny = ir.Constant(t, 2.2250738585072014e-308 if t == ir.DoubleType() else 1.1754943508222875e-38)
        small = b.fcmp_ordered("<", intrinsic(b, "fabs", t, [x]), tiny)
        return b.select(small, intrinsic(b, "copysign", t, [ir.Constant(t, 0.0), x]), x)

    # -- integers and bools ----------------------------------------------------
    def _integer(self, op, d, args):
        b = self.b
        x = args[0]
        y = args[1] if len(args) > 1 else None
        signed = d.is_signed
        if op is Op.ADD:
            return b.add(x, y)
        if op is Op.SUB:
            return b.sub(x, y)
        if op is Op.MUL:
            return b.mul(x, y)
        if op in (Op.DIV, Op.REM):
            return self._divide(op, d, x, y)
        if op in (Op.MAX, Op.MIN):
            pred = (">=" if op is Op.MAX else "<=")
            cmp = b.icmp_signed(pred, x, y) if signed else b.icmp_unsigned(pred, x, y)
            return b.select(cmp, x, y)
        if op is Op.AND:
            return b.and_(x, y)
        if op is Op.OR:
            return b.or_(x, y)
        if op is Op.XOR:
            return b.xor(x, y)
        if op in _SHIFT:
            return getattr(b, _SHIFT[op])(x, self._shift_amount(d, y))
        if op is Op.NOT:
            return b.not_(x)
        if op is Op.NEG:
            return b.neg(x)
        if op is Op.ABS:
            return b.select(b.icmp_signed("<", x, const(d, 0)), b.neg(x), x) if signed else x
        if op is Op.SIGN:
            zero = const(d, 0)
            pos = b.zext(b.icmp_signed(">", x, zero) if signed else b.icmp_unsigned(">", x, zero), x.type)
            neg = b.zext(b.icmp_signed("<", x, zero), x.type) if signed else zero
            return b.sub(pos, neg)
        if op is Op.POW:
            return self._int_pow(d, x, y)
        raise NotImplementedError(f"{op.spelling} on {d}")

    def _shift_amount(self, d, y):
        """TF's clamp of a shift amount to [0, bits - 1]."""
        b = self.b
        top = const(d, d.bits - 1)
        beyond = b.icmp_unsigned(">", y, top)         # a negative signed amount too
        clamped = b.select(b.icmp_signed("<", y, const(d, 0)), const(d, 0), top) if d.is_signed else top
        return b.select(beyond, clamped, y)

    def _divide(self, op, d, x, y):
        b = self.b
        zero, one = const(d, 0), const(d, 1)
        is_zero = b.icmp_unsigned("==", y, zero)
        self.raise_status(DIV_BY_ZERO, is_zero)
        if not d.is_signed:
            safe = b.select(is_zero, one, y)
            return b.udiv(x, safe) if op is Op.DIV else b.urem(x, safe)
        minus_one = b.icmp_signed("==", y, const(d, -1))
        safe = b.select(b.or_(is_zero, minus_one), one, y)
        if op is Op.DIV:
            return b.select(minus_one, b.neg(x), b.sdiv(x, safe))
        return b.select(minus_one, zero, b.srem(x, safe))

    def _int_pow(self, d, base, exp):
        """Exponentiation by squaring, wrapping like TF: a loop that ends when the
        exponent's remaining bits are 0 (unrolled over all 64 bits, LLVM took
        most of a second to compile one int64 power)."""
        b = self.b
        if d.is_signed:
            self.raise_status(NEGATIVE_POWER, b.icmp_signed("<", exp, const(d, 0)))
        pre = b.block
        head, body, done = (b.append_basic_block(f"ipow.{s}") for s in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        result, square, rest = (b.phi(x.type) for x in (base, base, exp))
        result.add_incoming(const(d, 1), pre)
        square.add_incoming(base, pre)
        rest.add_incoming(exp, pre)
        b.cbranch(b.icmp_unsigned("!=", rest, const(d, 0)), body, done)
        b.position_at_end(body)
        result.add_incoming(b.select(b.trunc(rest, I1), b.mul(result, square), result), body)
        square.add_incoming(b.mul(square, square), body)
        rest.add_incoming(b.lshr(rest, const(d, 1)), body)
        b.branch(head)
        b.position_at_end(done)
        return result

    def _compare(self, op, d, x, y):
        b = self.b
        if d.is_float:
            if op is Op.NE:
                return b.fcmp_unordered("!=", x, y)
            return b.fcmp_ordered(_FCMP[op], x, y)
        if d.is_signed:
            return b.icmp_signed(_FCMP[op], x, y)
        return b.icmp_unsigned(_FCMP[op], x, y)

    # -- casts -------------------------------------------------------------------
    def convert(self, x, src: dt.DType, dst: dt.DType):
        b = self.b
        if src is dst:
            return x
        if dst is dt.PRED:
            if src.is_float:
                return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
            return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
        if src.is_float and dst.is_float:
            return self._float_to_float(x, src, dst)
        if src.is_float:
            return self._float_to_int(x, src, dst)
        t = value_type(dst)
        if dst.is_float:
            v = b.uitofp(x, t) if (src is dt.PRED or not src.is_signed) else b.sitofp(x, t)
            return self._round_half(v, dst)
        if src is dt.PRED:
            return b.zext(x, t)
        if src.bits == dst.bits:
            return x
        if src.bits > dst.bits:
            return b.trunc(x, t)
        return b.sext(x, t) if src.is_signed else b.zext(x, t)

    def bitcast(self, x, src: dt.DType, dst: dt.DType):
        """Same-width reinterpretation; f16/bf16 registers hold f32 values of those types."""
        b = self.b
        if src is dt.F16:
            x = b.bitcast(b.fptrunc(x, ir.HalfType()), I16)
        elif src is dt.BF16:
            x = b.trunc(b.lshr(b.bitcast(x, I32), ir.Constant(I32, 16)), I16)   # exact: no rounding
        elif src.is_float:
            x = b.bitcast(x, ir.IntType(src.bits))
        if dst is dt.F16:
            return b.fpext(b.bitcast(x, ir.HalfType()), F32)
        if dst is dt.BF16:
            return bf16_to_f32(b, x)
        return b.bitcast(x, value_type(dst)) if dst.is_float else x

    def _float_to_float(self, x, src, dst):
        b = self.b
        tsrc, tdst = x.type, value_type(dst)
        if tsrc != tdst:
            x = b.fpext(x, tdst) if tdst == ir.DoubleType() else b.fptrunc(x, tdst)
        return self._round_half(x, dst)

    def _round_half(self, v, dst):
        """Rounds an f32 register value to f16/bf16 precision (registers stay f32)."""
        b = self.b
        if dst is dt.F16:
            return b.fpext(b.fptrunc(v, ir.HalfType()), F32)
        if dst is dt.BF16:
            return bf16_to_f32(b, f32_to_bf16(b, v))
        return v

    def _x86_cvtt(self, x, bits: int):
        """cvttss2si semantics: truncate; NaN/out of range give INT_MIN.  A plain fptosi
        (poison out of range, where the select never takes it): LLVM widens it to one
        cvttps2dq, where the saturating intrinsic became a scalar conversion per lane
        (f32 -> i32 of 2048x4096: 5.2 ms, against XLA's 1.8)."""
        b = self.b
        t = ir.IntType(bits)
        lo = ir.Constant(x.type, -float(2 ** (bits - 1)))
        hi = ir.Constant(x.type, float(2 ** (bits - 1)))
        in_range = b.and_(b.fcmp_ordered(">=", x, lo), b.fcmp_ordered("<", x, hi))
        return b.select(in_range, b.fptosi(x, t), ir.Constant(t, 1 << (bits - 1)))

    def _float_to_int(self, x, src, dst):
        """TF's Cast on x86-64 as its vector path computes it (see interp_cast.py's
        ``float_to_int`` for the rules and why the vector path)."""
        b = self.b
        t = value_type(dst)
        if dst in (dt.I32, dt.I64):
            return self._x86_cvtt(x, dst.bits)
        if dst is dt.U64:    # the compiler's branch-free sequence on x86-64
            a = self._x86_cvtt(x, 64)
            c = self._x86_cvtt(b.fsub(x, ir.Constant(x.type, float(2 ** 63))), 64)
            return b.or_(b.and_(b.ashr(a, ir.Constant(I64, 63)), c), a)
        c = self._x86_cvtt(x, 32)
        if dst is dt.U32:
            top = ir.Constant(x.type, float(2 ** 31))
            high = b.or_(self._x86_cvtt(b.fsub(x, top), 32), ir.Constant(I32, 1 << 31))
            return b.select(b.fcmp_ordered("<", x, top), c, high)
        if dst is dt.U8 and src in (dt.F64, dt.F16):     # through u16, read back as i16
            c = b.sext(b.trunc(self._clamp(c, 0, 0xFFFF), I16), I32)
        lo, hi = (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1) if dst.is_signed else \
            (0, (1 << dst.bits) - 1)
        return b.trunc(self._clamp(c, lo, hi), t)

    def _clamp(self, c, lo: int, hi: int):
        b = self.b
        lo_c, hi_c = ir.Constant(c.type, lo), ir.Constant(c.type, hi)
        c = b.select(b.icmp_signed("<", c, lo_c), lo_c, c)
        return b.select(b.icmp_signed(">", c, hi_c), hi_c, c)


def f32_to_bf16(b: ir.IRBuilder, v):
    """Round-to-nearest-even f32 -> bf16 bits; NaN stays a quiet NaN."""
    bits = b.bitcast(v, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb))
    is_nan = b.fcmp_unordered("uno", v, v)
    out = b.select(is_nan, b.or_(bits, ir.Constant(I32, 0x00400000)), rounded)
    return b.trunc(b.lshr(out, ir.Constant(I32, 16)), I16)


def bf16_to_f32(b: ir.IRBuilder, bits):
    return b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)
