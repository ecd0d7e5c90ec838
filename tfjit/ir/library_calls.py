"""``Module``'s builders of runtime-library calls (tfjit/ir/module.py): the matrix
product, the 2-D convolution and its gradients, QR, FFT, the dense solvers and the
spectral decompositions.  Each checks its operands' shapes and types (the runtime
library computes in f32/f64: ``LIBRARY_DTYPES``) and adds one instruction."""
from __future__ import annotations

from tfjit import dtypes as dt
from tfjit.ir.instr import LIBRARY_DTYPES, Instr, IRError, _type_list
from tfjit.ir.ops import CONV_ACTIVATIONS, CONV_BACKPROPS, SOLVER_ATTRS, SPECTRAL_ATTRS, Op
from tfjit.ir.packing import fft_shape, log_determinant_parts, lu_parts, qr_parts, spectral_parts


# a dot, a 2-D convolution (and one with its bias, passes/epilogue.py), a 3-D one and
# their gradients also take bf16 (passes/dots.py Bf16Products: TF's bf16 kernels, f32
# sums rounded once)
PRODUCT_DTYPES = LIBRARY_DTYPES + (dt.BF16,)


class LibraryCalls:
    """Mixed into ``Module``, whose ``_add`` appends the instruction."""

    def dot(self, lhs: Instr, rhs: Instr, transpose_lhs: bool = False,
            transpose_rhs: bool = False) -> Instr:
        """Matrix product of the trailing two dims (f32, f64, or bf16 summed in f32 and
        rounded once); an optional leading batch dim may be 1 on one side (broadcast).
        ``transpose_*``: the operand is stored transposed."""
        if lhs.rank != rhs.rank or lhs.rank not in (2, 3) or lhs.dtype is not rhs.dtype \
                or lhs.dtype not in PRODUCT_DTYPES:
            raise IRError(f"dot of {lhs.dtype.name}{list(lhs.shape)} and "
                          f"{rhs.dtype.name}{list(rhs.shape)}: needs two f32/f64/bf16 operands of "
                          "rank 2 or 3")
        m, k = lhs.shape[-2:][::-1] if transpose_lhs else lhs.shape[-2:]
        k2, n = rhs.shape[-2:][::-1] if transpose_rhs else rhs.shape[-2:]
        if k != k2:
            raise IRError(f"dot: contracting sizes differ ({k} vs {k2})")
        batch = ()
        if lhs.rank == 3:
            a, b = lhs.shape[0], rhs.shape[0]
            if a != b and 1 not in (a, b):
                raise IRError(f"dot: batch sizes {a} and {b} do not broadcast")
            batch = (b if a == 1 else a,)
        attrs = {"transpose_lhs": int(bool(transpose_lhs)), "transpose_rhs": int(bool(transpose_rhs))}
        return self._add(Instr(Op.DOT, lhs.dtype, batch + (m, n), (lhs, rhs), attrs))

    def convolution(self, x: Instr, w: Instr, strides, dilations, padding) -> Instr:
        """2-D convolution: x NHWC, w HWIO, explicit zero ``padding`` (top, bottom, left,
        right), filter ``dilations``; the result is NHWC."""
        shape, attrs = _convolution(x, w, strides, dilations, padding)
        return self._add(Instr(Op.CONV, x.dtype, shape, (x, w), attrs))

    def convolution_bias(self, x: Instr, w: Instr, bias: Instr, strides, dilations, padding,
                         activation: str = "none") -> Instr:
        """``activation(convolution(x, w) + bias)``, bias [O] added along the channels,
        in one library call (passes/epilogue.py builds it from the three)."""
        shape, attrs = _convolution(x, w, strides, dilations, padding)
        if bias.rank != 1 or bias.dtype is not x.dtype or bias.shape[0] != w.shape[3] \
                or x.dtype not in PRODUCT_DTYPES \
                or activation not in CONV_ACTIVATIONS:
            raise IRError(f"convolution-bias: bias {bias.dtype.name}{list(bias.shape)} for "
                          f"{w.shape[3]} channels of {x.dtype.name}, activation {activation!r} "
                          f"(one of {', '.join(CONV_ACTIVATIONS)})")
        attrs["activation"] = activation
        return self._add(Instr(Op.CONV_BIAS, x.dtype, shape, (x, w, bias), attrs))

    def conv_backprop(self, op: Op, a: Instr, grad: Instr, shape, strides, padding) -> Instr:
        """A gradient of the undilated convolution (``Op.CONV_BACKPROP_*``: filter HWIO)
        or depthwise convolution (``Op.DEPTHWISE_BACKPROP_*``: filter [kh, kw, C,
        multiplier]) of x NHWC with explicit ``padding`` (top, bottom, left, right),
        whose output gradient is ``grad``.  ``*_INPUT``: ``a`` is the filter and the
        result is dx of ``shape`` (x's); ``*_FILTER``: ``a`` is x and the result is the
        filter's gradient of ``shape``."""
        strides, padding, shape = tuple(strides), tuple(padding), tuple(shape)
        of_input = op in (Op.CONV_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_INPUT)
        x_shape, w_shape = (shape, a.shape) if of_input else (a.shape, shape)
        depthwise = op in (Op.DEPTHWISE_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_FILTER)
        bad = op not in CONV_BACKPROPS or a.dtype is not grad.dtype \
            or a.dtype not in (LIBRARY_DTYPES if depthwise else PRODUCT_DTYPES) or a.rank != 4 or grad.rank != 4 or len(shape) != 4 \
            or len(strides) != 2 or len(padding) != 4 or min(strides) < 1 or min(padding) < 0
        if not bad:
            depth = w_shape[2] * w_shape[3] if depthwise else w_shape[3]
            bad = x_shape[3] != w_shape[2] or grad.shape[0] != x_shape[0] or grad.shape[3] != depth
        if not bad:
            for d in range(2):
                size = x_shape[1 + d] + padding[2 * d] + padding[2 * d + 1]
                bad = bad or size < w_shape[d] or grad.shape[1 + d] != (size - w_shape[d]) // strides[d] + 1
        if bad:
            raise IRError(f"{op.spelling} of {a.dtype.name}{list(a.shape)} and "
                          f"{grad.dtype.name}{list(grad.shape)} to {list(shape)} (strides "
                          f"{list(strides)}, padding {list(padding)}) is invalid")
        return self._add(Instr(op, a.dtype, shape, (a, grad), {"strides": strides, "padding": padding}))

    def convolution_3d(self, op: Op, a: Instr, b: Instr, strides, padding, shape=None) -> Instr:
        """An undilated 3-D convolution or one of its gradients (``CONV3D_OPS``) of x NDHWC
        with a filter DHWIO [kd, kh, kw, C, O], explicit zero ``padding`` (low and high
        per spatial dim: front, back, top, bottom, left, right).  ``Op.CONV3D``: a is x,
        b the filter, the result y NDHWC (``shape`` unused); ``Op.CONV3D_BACKPROP_INPUT``:
        a is the filter, b the gradient of y, the result dx of ``shape``;
        ``Op.CONV3D_BACKPROP_FILTER``: a is x, b the gradient of y, the result the
        filter's gradient of ``shape``."""
        strides, padding = tuple(strides), tuple(padding)
        x_shape, w_shape = {Op.CONV3D: (a.shape, b.shape),
                            Op.CONV3D_BACKPROP_INPUT: (tuple(shape or ()), a.shape),
                            Op.CONV3D_BACKPROP_FILTER: (a.shape, tuple(shape or ()))}.get(op, ((), ()))
        y = conv3d_output(x_shape, w_shape, strides, padding) \
            if a.dtype is b.dtype and a.dtype in PRODUCT_DTYPES else None
        if y is None or (op is not Op.CONV3D and b.shape != y):
            raise IRError(f"{op.spelling} of {a.dtype.name}{list(a.shape)} and "
                          f"{b.dtype.name}{list(b.shape)} (input {list(x_shape)}, filter "
                          f"{list(w_shape)}, strides {list(strides)}, padding {list(padding)}) "
                          "is invalid")
        result = y if op is Op.CONV3D else x_shape if op is Op.CONV3D_BACKPROP_INPUT else w_shape
        return self._add(Instr(op, a.dtype, result, (a, b), {"strides": strides, "padding": padding}))

    def convolution_3d_bias(self, x: Instr, w: Instr, bias: Instr, strides, padding,
                            activation: str = "none") -> Instr:
        """``activation(convolution_3d(x, w) + bias)``, bias [O] added along the channels,
        in one library call (passes/epilogue.py builds it from the three)."""
        shape = conv3d_output(x.shape, w.shape, tuple(strides), tuple(padding))
        if shape is None or x.dtype is not w.dtype or x.dtype not in LIBRARY_DTYPES \
                or bias.rank != 1 or bias.dtype is not x.dtype or bias.shape[0] != w.shape[4] \
                or activation not in CONV_ACTIVATIONS:
            raise IRError(f"{Op.CONV3D_BIAS.spelling} of {x.dtype.name}{list(x.shape)} with "
                          f"{w.dtype.name}{list(w.shape)} and bias {bias.dtype.name}"
                          f"{list(bias.shape)} (strides {list(strides)}, padding {list(padding)}, "
                          f"activation {activation!r}) is invalid")
        return self._add(Instr(Op.CONV3D_BIAS, x.dtype, shape, (x, w, bias),
                               {"strides": tuple(strides), "padding": tuple(padding),
                                "activation": activation}))

    def qr(self, x: Instr, full_matrices: bool) -> Instr:
        """Q and R of the matrices x [B, M, N], packed in one flat result (``qr_parts``)."""
        if x.rank != 3 or x.dtype not in LIBRARY_DTYPES or 0 in x.shape:
            raise IRError(f"qr of {x.dtype.name}{list(x.shape)}: needs a non-empty f32/f64 [B, M, N]")
        _, (r_start, r_size) = qr_parts(x.shape, full_matrices)
        return self._add(Instr(Op.QR, x.dtype, (r_start + r_size,), (x,),
                               {"full_matrices": int(bool(full_matrices))}))

    def fft(self, x: Instr, fft_type: int, fft_length: tuple) -> Instr:
        """TF's FFT of kind ``FFT_TYPES[fft_type]`` over the last ``r = len(fft_length)``
        (1-3) dims of x [B, dims...] (f32/f64; a complex operand or result is its real
        view, one more trailing dim of 2).  fft/ifft: dims == fft_length, the same shape
        out.  rfft: dims >= fft_length (cropped), out [B, fft_length] with the last
        n // 2 + 1.  irfft: dims >= fft_length but the last >= n // 2 + 1 (cropped),
        out [B, fft_length].  An empty x needs an empty result (TF leaves the rest
        unwritten); ifft/irfft scale by 1 / prod(fft_length) as TF's."""
        fft_length = tuple(int(n) for n in fft_length)
        shape = fft_shape(x.shape, fft_type, fft_length) if x.dtype in LIBRARY_DTYPES else None
        if shape is None:
            raise IRError(f"fft of {x.dtype.name}{list(x.shape)}: fft_type {fft_type}, fft_length "
                          f"{list(fft_length)} is invalid")
        return self._add(Instr(Op.FFT, x.dtype, shape, (x,), {"fft_type": int(fft_type),
                                                                "fft_length": fft_length}))

    def matrix_op(self, op: Op, *operands: Instr, lower: bool = False, adjoint: bool = False) -> Instr:
        """A dense solver (``SOLVER_ATTRS``) of the non-empty square matrices a [B, M, M]
        (f32/f64) and, for the two solves, right-hand sides b [B, M, N] of a's dtype.
        Results: the solves [B, M, N]; CHOLESKY, MATRIX_INVERSE [B, M, M]; DETERMINANT
        [B]; LOG_DETERMINANT the signs and logs packed (``log_determinant_parts``).
        ``lower``/``adjoint`` are kept where the op takes them (``SOLVER_ATTRS``)."""
        a, rhs = operands[0], operands[1:]
        solve = op in (Op.TRIANGULAR_SOLVE, Op.MATRIX_SOLVE)
        if op not in SOLVER_ATTRS or len(operands) != 1 + solve or a.rank != 3 \
                or a.dtype not in LIBRARY_DTYPES or a.shape[1] != a.shape[2] or 0 in a.shape \
                or any(b.dtype is not a.dtype or b.rank != 3 or b.shape[:2] != a.shape[:2]
                       or b.shape[2] == 0 for b in rhs):
            raise IRError(f"{op.spelling} of {_type_list(operands)}: needs non-empty f32/f64 "
                          f"[B, M, M]{' and [B, M, N]' if solve else ''}")
        batch, rows = a.shape[:2]
        shape = {Op.DETERMINANT: (batch,), Op.LOG_DETERMINANT: (sum(log_determinant_parts(batch)[1]),)
                 }.get(op, rhs[0].shape if solve else a.shape)
        flags = {"lower": int(bool(lower)), "adjoint": int(bool(adjoint))}
        return self._add(Instr(op, a.dtype, shape, operands, {k: flags[k] for k in SOLVER_ATTRS[op]}))

    def lu(self, a: Instr) -> Instr:
        """LU: P a = L U of the non-empty f32/f64 square matrices a [B, M, M], packed
        (``lu_parts``): L's strictly lower and U's upper triangles in one [B, M, M], then
        the permutation [B, M] (row i of P a is row perm[i] of a) as exact integers of
        a's dtype (M < 2^24, f32's exact integers)."""
        if a.rank != 3 or a.dtype not in LIBRARY_DTYPES or 0 in a.shape or a.shape[1] != a.shape[2] \
                or a.shape[1] >= 2**24:
            raise IRError(f"{Op.LU.spelling} of {a.dtype.name}{list(a.shape)}: needs non-empty f32/f64 "
                          f"[B, M, M], M < 2^24")
        start, size = lu_parts(a.shape[0], a.shape[1])[1]
        return self._add(Instr(Op.LU, a.dtype, (start + size,), (a,)))

    def solve_ls(self, a: Instr, b: Instr, l2: Instr, fast: bool) -> Instr:
        """MATRIX_SOLVE_LS: x [B, N, K] minimising ||a x - b||^2 + l2 ||x||^2 for the
        non-empty f32/f64 a [B, M, N], b [B, M, K] and the f64 scalar l2 (TF's kernel
        refuses l2 < 0, and a rank-deficient a on the fast path, at run time)."""
        if a.rank != 3 or a.dtype not in LIBRARY_DTYPES or 0 in a.shape or b.dtype is not a.dtype \
                or b.rank != 3 or b.shape[:2] != a.shape[:2] or b.shape[2] == 0 \
                or l2.dtype is not dt.F64 or l2.rank != 0:
            raise IRError(f"{Op.MATRIX_SOLVE_LS.spelling} of {_type_list((a, b, l2))}: needs non-empty "
                          f"f32/f64 [B, M, N] and [B, M, K], and an f64 scalar")
        return self._add(Instr(Op.MATRIX_SOLVE_LS, a.dtype, (a.shape[0], a.shape[2], b.shape[2]),
                               (a, b, l2), {"fast": int(bool(fast))}))

    def spectral(self, op: Op, x: Instr, **flags: bool) -> Instr:
        """A spectral decomposition (``SPECTRAL_ATTRS``: SELF_ADJOINT_EIG of square, SVD of
        any non-empty f32/f64 matrices x [B, M, N]), its parts packed in one flat result
        (``spectral_parts``); ``flags`` are the op's attributes, each False if not given."""
        attrs = {k: int(bool(flags.get(k, False))) for k in SPECTRAL_ATTRS.get(op, ())}
        if op not in SPECTRAL_ATTRS or set(flags) - set(attrs) or x.rank != 3 \
                or x.dtype not in LIBRARY_DTYPES or 0 in x.shape \
                or (op is Op.SELF_ADJOINT_EIG and x.shape[1] != x.shape[2]):
            raise IRError(f"{op.spelling} of {x.dtype.name}{list(x.shape)} ({sorted(flags)}): needs "
                          f"non-empty f32/f64 {'[B, M, M]' if op is Op.SELF_ADJOINT_EIG else '[B, M, N]'}")
        start, size = spectral_parts(op, x.shape, attrs)[-1]
        return self._add(Instr(op, x.dtype, (start + size,), (x,), attrs))


def _convolution(x: Instr, w: Instr, strides, dilations, padding) -> tuple:
    """(result shape, attrs) of a 2-D convolution, its operands checked."""
    strides, dilations, padding = tuple(strides), tuple(dilations), tuple(padding)
    if x.rank != 4 or w.rank != 4 or x.dtype is not w.dtype or x.dtype not in PRODUCT_DTYPES \
            or x.shape[3] != w.shape[2] or len(strides) != 2 or len(dilations) != 2 \
            or len(padding) != 4 or min(strides + dilations) < 1 or min(padding) < 0:
        raise IRError(f"convolution of {x.dtype.name}{list(x.shape)} with "
                      f"{w.dtype.name}{list(w.shape)} (strides {list(strides)}, dilations "
                      f"{list(dilations)}, padding {list(padding)}) is invalid")
    out = []
    for d in range(2):
        size = x.shape[1 + d] + padding[2 * d] + padding[2 * d + 1]
        window = (w.shape[d] - 1) * dilations[d] + 1
        if size < window:
            raise IRError(f"convolution: window {window} exceeds the padded input {size}")
        out.append((size - window) // strides[d] + 1)
    return (x.shape[0], *out, w.shape[3]), {"strides": strides, "dilations": dilations,
                                            "padding": padding}


def conv3d_shapes(i: Instr) -> tuple:
    """(x, filter, y) shapes of 3-D convolution instruction ``i`` (``CONV3D_OPS``,
    ``Op.CONV3D_BIAS``): its operands' and result's, by what each is."""
    a, b = i.operands[:2]
    if i.op in (Op.CONV3D, Op.CONV3D_BIAS):
        return a.shape, b.shape, i.shape
    if i.op is Op.CONV3D_BACKPROP_INPUT:
        return i.shape, a.shape, b.shape
    return a.shape, i.shape, b.shape


def conv3d_output(x_shape, w_shape, strides, padding):
    """The output shape of an undilated 3-D convolution of x NDHWC by a filter DHWIO, or
    None where the shapes, strides or padding are not those of one."""
    if len(x_shape) != 5 or len(w_shape) != 5 or x_shape[4] != w_shape[3] or len(strides) != 3 \
            or len(padding) != 6 or min(strides) < 1 or min(padding) < 0:
        return None
    out = []
    for d in range(3):
        size = x_shape[1 + d] + padding[2 * d] + padding[2 * d + 1]
        if size < w_shape[d]:
            return None
        out.append((size - w_shape[d]) // strides[d] + 1)
    return (x_shape[0], *out, w_shape[4])
