"""TF's FFT ops (FFT, IFFT, RFFT, IRFFT and their 2D/3D forms) on complex64/complex128.

Each is one ``fft`` library call (ir/module.py ``Module.fft``) on the real view of its
complex operand and result (lower/complex.py), the batch dims flattened into one: under
the launch op it runs TF's own kernel (runtime/tf_fft.cc), so results are TF's bit for
bit.  RFFT/IRFFT's ``fft_length`` is a compile-time constant input (a fed value is a
constant argument, compiled per value), checked as TF's kernel checks it.  tfjit-aot
refuses the call and the host runner fails it: TF's CPU FFT is DUCC's, which tfjit's
own runtime (linalg.cc) does not have.
"""
from __future__ import annotations

import math

from tfjit.ir.ops import FFT_TYPES
from tfjit.lower import complex as cx
from tfjit.lower.registry import Complex, Unsupported, register_complex

_RANKS = {"": 1, "2D": 2, "3D": 3}
_OPS = [kind.upper() + suffix for kind in FFT_TYPES for suffix in _RANKS]


@register_complex(*[op for op in _OPS if "R" in op[:2]], const_inputs=(1,))
@register_complex(*[op for op in _OPS if "R" not in op[:2]])
def _fft(ctx):
    op = ctx.node.op
    kind, rank = op.rstrip("23D").lower(), _RANKS[op[len(op.rstrip("23D")):]]
    m, x = ctx.m, ctx.inputs[0]
    out_type = ctx.attr("Tcomplex").ir
    if kind == "rfft":
        if isinstance(x, Complex) or x.dtype is not out_type.part:
            raise Unsupported(f"{op}: a {x.dtype} input for a {out_type} result")
        shape, operand = x.shape, x
    else:
        if not isinstance(x, Complex) or x.dtype is not out_type:
            raise Unsupported(f"{op}: input 0 is {x.dtype}, not {out_type}")
        shape, operand = x.shape, cx.view(m, x)
    if len(shape) < rank:
        raise Unsupported(f"{op}: input must have rank of at least {rank} but got {list(shape)}")
    batch, dims = shape[:-rank], shape[-rank:]
    if kind in ("fft", "ifft"):
        fft_length = dims
    else:
        fft_length = tuple(ctx.const_ints(1, "fft_length"))
        if len(fft_length) != rank or min(fft_length) < 0:
            raise Unsupported(f"{op}: fft_length {list(fft_length)} must be {rank} lengths >= 0")
        for i, (d, n) in enumerate(zip(dims, fft_length)):
            least = n // 2 + 1 if kind == "irfft" and i == rank - 1 else n
            if d and d < least:
                raise Unsupported(f"{op}: input dimension {len(batch) + i} must have length of "
                                  f"at least {least} but got {d}")
    out_dims = fft_length
    if kind == "rfft" and fft_length[-1]:
        out_dims = fft_length[:-1] + (fft_length[-1] // 2 + 1,)
    if math.prod(shape) == 0 and math.prod(batch + out_dims):
        raise Unsupported(f"{op} of an empty {list(shape)} input to a non-empty result: TF's kernel "
                          "leaves that result unwritten")
    pair = () if kind == "rfft" else (2,)
    flat = m.reshape(operand, (math.prod(batch),) + dims + pair)
    y = m.fft(flat, FFT_TYPES.index(kind), fft_length)
    if kind == "irfft":
        return m.reshape(y, batch + out_dims)
    return cx.unpack(m, m.reshape(y, batch + out_dims + (2,)))
