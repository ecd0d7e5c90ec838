"""Kernels for runtime-library instructions (``Kind.LIBRARY``: dot, convolution,
the convolution gradients, QR, the dense solvers, the spectral decompositions and
the FFTs).

A library kernel has the launch op's kernel ABI, ``void k(void** bufs, i64 begin,
i64 end)``, and runs as a single row: it loads its operands' and result's
buffers from ``bufs`` and calls the runtime library (runtime/tf_kernels.cc), which
runs TF's own kernel on TF's intra-op pool under the launch op, or its Eigen code
inline where there is none (``bufs[device_slot]``: the runtime context, or null).
A call that returns nonzero (TF's kernel failed; its status is in the runtime
context) sets the kernel's status code, whose message names the TF node.
The fusion pass guarantees every operand is a dense buffer (a parameter or
another kernel's root, possibly seen through reshapes, which do not move data, or a
window of whole rows of a parameter, at a start the kernel computes).
"""
from __future__ import annotations

from llvmlite import ir

from tfjit import dtypes as dt
from tfjit.codegen.llvm_types import I32, I64, PTR, VOID, i64
from tfjit.ir.library_calls import conv3d_shapes
from tfjit.ir.ops import CONV3D_OPS, FFT_TYPES, SOLVER_ATTRS, SPECTRAL_ATTRS, Op
from tfjit.passes.cost import library_flops
from tfjit.passes.dots import BF16_CALL_FLOPS, BF16_CALLS as BF16_OPS

_SUFFIX = {"f32": "f32", "f64": "f64", "bf16": "bf16"}

# name -> argument types after (runtime, kernel, out, the operands); all but the flags
# are i64.
SIGNATURES = {
    "dot": [I64] * 6 + [I32, I32],
    "conv2d": [I64] * 17,
    "conv2d_bias": [I64] * 17 + [I32],     # the convolution's, then the activation (ACTIVATION_CODES)
    "conv2d_backprop_input": [I64] * 15,
    "conv2d_backprop_filter": [I64] * 15,
    "depthwise_backprop_input": [I64] * 15,
    "depthwise_backprop_filter": [I64] * 15,
    # the 3-D convolutions (runtime/tf_conv3d.cc): linalg.h's TFJIT_CONV3D_PARAMS
    **{name: [I64] * 21 for name in ("conv3d", "conv3d_backprop_input", "conv3d_backprop_filter")},
    "conv3d_bias": [I64] * 21 + [I32],     # the convolution's, then the activation
    "qr": [I64, I64, I64, I32],
    # the dense solvers: (batch, m, n, lower, adjoint) for the two solves, (batch, m,
    # adjoint) for the others; an op ignores a flag it does not take
    **{name: [I64, I64, I64, I32, I32] for name in ("triangular_solve", "matrix_solve")},
    **{name: [I64, I64, I32] for name in ("cholesky", "matrix_inverse", "determinant",
                                          "log_determinant")},
    "lu": [I64, I64],                                # (batch, m)
    "matrix_solve_ls": [I64, I64, I64, I64, I32],    # (batch, m, n, k, fast)
    # the spectral decompositions: (batch, m, n, compute_v/compute_uv, full_matrices)
    **{name: [I64, I64, I64, I32, I32] for name in ("self_adjoint_eig", "svd")},
    # (batch, the operand's transformed dims d0-d2, fft_length l0-l2 (unused ones 1),
    # rank, fft_type): TF's FFT kernels, under the launch op only (ONLY_UNDER_TF)
    "fft": [I64] * 7 + [I32, I32],
}

# entry points only the op library has (TF's kernel, no Eigen twin in linalg.cc): the
# host runner's call fails and tfjit-aot refuses them (pipeline.emit)
ONLY_UNDER_TF = frozenset({"fft"})


def symbol(kind: str, dtype, prefix: str = "tfjit_rt_") -> str:
    return f"{prefix}{kind}_{_SUFFIX[dtype.name]}"


def runtime_symbols(prefix: str = "tfjit_rt_") -> list[str]:
    """Every runtime-library function a kernel may call (runtime/tf_kernels.cc exports
    them as ``tfjit_rt_*``, the AOT runtime, runtime/aot_runtime.cc, as ``tfjit_aot_rt_*``)."""
    return [f"{prefix}{k}_{s}" for k in SIGNATURES for s in _SUFFIX.values()
            if (prefix == "tfjit_rt_" or k not in ONLY_UNDER_TF) and (s != "bf16" or k in BF16_CALLS)]


def _dot_args(i) -> list:
    lhs, rhs = i.operands
    m, n = i.shape[-2:]
    k = lhs.shape[-2] if i.attrs["transpose_lhs"] else lhs.shape[-1]
    batch = i.shape[0] if i.rank == 3 else 1

    def stride(x):
        return 0 if x.rank == 2 or x.shape[0] == 1 else x.shape[1] * x.shape[2]

    return [i64(v) for v in (batch, stride(lhs), stride(rhs), m, n, k)] + \
        [ir.Constant(I32, i.attrs["transpose_lhs"]), ir.Constant(I32, i.attrs["transpose_rhs"])]


def _conv_args(i) -> list:
    x, w = i.operands[:2]
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    _, ho, wo, _ = i.shape
    values = (n, h, wd, c, kh, kw, o, ho, wo, *i.attrs["strides"], *i.attrs["dilations"],
              *i.attrs["padding"])
    return [i64(v) for v in values]


# a fused convolution's activation as the runtime takes it (runtime/linalg.h: TfjitActivation)
ACTIVATION_CODES = {"none": 0, "relu": 1, "relu6": 2}


def _activation(i):
    return ir.Constant(I32, ACTIVATION_CODES[i.attrs["activation"]])


def _conv_bias_args(i) -> list:
    return _conv_args(i) + [_activation(i)]


def _backprop_args(i) -> list:
    a, grad = i.operands
    of_input = i.op in (Op.CONV_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_INPUT)
    (n, h, wd, c), (kh, kw, _, k) = (i.shape, a.shape) if of_input else (a.shape, i.shape)
    _, ho, wo, _ = grad.shape
    return [i64(v) for v in (n, h, wd, c, kh, kw, k, ho, wo, *i.attrs["strides"], *i.attrs["padding"])]


def _conv3d_args(i) -> list:
    x, w, y = conv3d_shapes(i)
    return [i64(v) for v in (*x, *w[:3], w[4], *y[1:4], *i.attrs["strides"], *i.attrs["padding"])]


def _qr_args(i) -> list:
    batch, rows, cols = i.operands[0].shape
    return [i64(batch), i64(rows), i64(cols), ir.Constant(I32, i.attrs["full_matrices"])]


def _solver_args(i) -> list:
    batch, rows, _ = i.operands[0].shape
    flags = [ir.Constant(I32, i.attrs.get(k, 0)) for k in ("lower", "adjoint")]
    if len(i.operands) == 2:
        return [i64(batch), i64(rows), i64(i.operands[1].shape[2])] + flags
    return [i64(batch), i64(rows), flags[1]]


def _spectral_args(i) -> list:
    batch, rows, cols = i.operands[0].shape
    flags = [ir.Constant(I32, i.attrs.get(k, 0)) for k in ("compute_v" if i.op is Op.SELF_ADJOINT_EIG
                                                           else "compute_uv", "full_matrices")]
    return [i64(batch), i64(rows), i64(cols)] + flags


def _solve_ls_args(i) -> list:
    batch, rows, cols = i.operands[0].shape
    return [i64(batch), i64(rows), i64(cols), i64(i.operands[1].shape[2]), ir.Constant(I32, i.attrs["fast"])]
def _fft_args(i) -> list:
    x, n = i.operands[0], i.attrs["fft_length"]
    kind = FFT_TYPES[i.attrs["fft_type"]]
    dims = x.shape[1:] if kind == "rfft" else x.shape[1:-1]
    pad = (1,) * (3 - len(n))
    return [i64(v) for v in (x.shape[0], *dims, *pad, *n, *pad)] + \
        [ir.Constant(I32, len(n)), ir.Constant(I32, i.attrs["fft_type"])]


def fft_tf_op(i) -> str:
    """The TF op of FFT instruction ``i`` (FFT, IRFFT2D, ...)."""
    rank = len(i.attrs["fft_length"])
    return FFT_TYPES[i.attrs["fft_type"]].upper() + ("" if rank == 1 else f"{rank}D")


# op -> (runtime function, its arguments, the TF kernel it runs under the launch op)
_CALLS = {
    Op.DOT: ("dot", _dot_args, lambda i: "BatchMatMulV2" if i.rank == 3 and i.shape[0] > 1 else "MatMul"),
    Op.CONV: ("conv2d", _conv_args, lambda i: "Conv2D"),
    Op.CONV_BIAS: ("conv2d_bias", _conv_bias_args, lambda i: "_FusedConv2D"),
    Op.CONV_BACKPROP_INPUT: ("conv2d_backprop_input", _backprop_args, lambda i: "Conv2DBackpropInput"),
    Op.CONV_BACKPROP_FILTER: ("conv2d_backprop_filter", _backprop_args, lambda i: "Conv2DBackpropFilter"),
    Op.DEPTHWISE_BACKPROP_INPUT: ("depthwise_backprop_input", _backprop_args,
                                  lambda i: "DepthwiseConv2dNativeBackpropInput"),
    Op.DEPTHWISE_BACKPROP_FILTER: ("depthwise_backprop_filter", _backprop_args,
                                   lambda i: "DepthwiseConv2dNativeBackpropFilter"),
    Op.CONV3D: ("conv3d", _conv3d_args, lambda i: "Conv3D"),
    Op.CONV3D_BIAS: ("conv3d_bias", lambda i: _conv3d_args(i) + [_activation(i)], lambda i: "_FusedConv3D"),
    Op.CONV3D_BACKPROP_INPUT: ("conv3d_backprop_input", _conv3d_args, lambda i: "Conv3DBackpropInputV2"),
    Op.CONV3D_BACKPROP_FILTER: ("conv3d_backprop_filter", _conv3d_args, lambda i: "Conv3DBackpropFilterV2"),
    Op.QR: ("qr", _qr_args, lambda i: "Qr"),
    **{op: (name, _solver_args, lambda i, tf_op=tf_op: tf_op) for op, name, tf_op in (
        (Op.TRIANGULAR_SOLVE, "triangular_solve", "MatrixTriangularSolve"),
        (Op.MATRIX_SOLVE, "matrix_solve", "MatrixSolve"),
        (Op.CHOLESKY, "cholesky", "Cholesky"),
        (Op.MATRIX_INVERSE, "matrix_inverse", "MatrixInverse"),
        (Op.DETERMINANT, "determinant", "MatrixDeterminant"),
        (Op.LOG_DETERMINANT, "log_determinant", "LogMatrixDeterminant"))},
    Op.LU: ("lu", lambda i: [i64(i.operands[0].shape[0]), i64(i.operands[0].shape[1])], lambda i: "Lu"),
    Op.MATRIX_SOLVE_LS: ("matrix_solve_ls", _solve_ls_args, lambda i: "MatrixSolveLs"),
    Op.SELF_ADJOINT_EIG: ("self_adjoint_eig", _spectral_args, lambda i: "SelfAdjointEigV2"),
    Op.SVD: ("svd", _spectral_args, lambda i: "Svd"),
    Op.FFT: ("fft", _fft_args, fft_tf_op),
}

# the entry points with a bf16 variant (the calls passes/dots.py Bf16Products makes, and
# the convolution with its bias that passes/epilogue.py folds one into); the others
# f32/f64 only
BF16_CALLS = frozenset(_CALLS[op][0] for op in BF16_OPS + (Op.CONV_BIAS,))


# Which of TF's kernels a call runs under the launch op (runtime/tf_kernels.cc's Family):
# the op's default CPU kernel (Eigen, with TF's oneDNN contraction kernel inside; what
# graph mode runs with oneDNN off), its oneDNN kernel (_MklMatMul, _MklNative*; what
# TF_ENABLE_ONEDNN_OPTS=1 runs), or the fastest of the two and of the default kernel
# run in parts side by side (runtime/kernel_parts.cc), timed over the call's first runs.
# All are TF's; results agree within float tolerance.
DEFAULT, ONEDNN, MEASURED = 0, 1, 2
# measured without oneDNN's kernel among the candidates (tf_kernels.h kMeasuredWithoutOneDnn)
MEASURED_WITHOUT_ONEDNN = 4



# Where TF runs oneDNN's kernels, a call with at least this many output positions takes
# oneDNN's kernel untimed (tf_kernel).
ONEDNN_SURE_POSITIONS = 8192


def tf_kernel(i, onednn: bool, native_bf16: bool = False) -> tuple[int, str]:
    """(kernel family, why) for library instruction ``i``; ``onednn``: TF runs oneDNN's
    kernels; ``native_bf16``: the CPU multiplies bf16 itself (Target.native_bf16).

    A bf16 call (passes/dots.py Bf16Products) takes oneDNN's bf16 kernel where both hold
    (graph mode's kernel; 2x the f32 call's speed on Zen 4's AVX512-BF16), else it is the
    f32 call on widened operands, measured as any f32 call, rounded once.

    Which kernel is faster depends on the CPU and on the call's size: on 2 AVX2 cores
    Eigen's convolution beat oneDNN's for input depths over 4 (up to 1.7x) and lost
    below (1.3-2.6x); on 2 AVX-512 cores with VNNI oneDNN's won or tied on every
    shape of the Keras CNN and MobileNetV2 at their batches (128, 8), but lost most of
    InceptionV3's convolutions at batch 4 (96x96 inputs), up to 8x: a 1x1 convolution
    of [4,1,1,2048] by 2048x448 took 577 us in oneDNN, 73 us in the default kernel.
    oneDNN reorders the filter into its blocked layout at every call (a variable's
    value is no constant it could cache), work that grows with the filter alone,
    while the convolution's grows with the filter times the output positions
    (batch x output rows x columns; rows for a dot): with few positions the reorder
    dominates.  So a call that either kernel can run is timed where it runs, over its
    first calls (runtime/kernel_choice.cc: MeasuredFamily; ``launch.kernel_choices()``
    lists the outcomes), together with the default kernel run in parts side by side,
    one thread each, where the call divides into independent rows (kernel_parts.cc: TF's
    default kernel left the second core idle on a ResNet's convolutions at batch 4),
    except where TF itself runs oneDNN's kernels (it turns them on for such CPUs) and
    the call has at least ONEDNN_SURE_POSITIONS output positions: there oneDNN's won
    every call measured (InceptionV3's from 8100 positions up, the Keras CNN's,
    MobileNetV2's first layers), and timing is not free: it runs both kernels, and the
    loser's scratch memory stays in TF's allocator pool (20 MB for the Keras CNN
    step)."""
    if i.op in (Op.QR, Op.LU, Op.MATRIX_SOLVE_LS, Op.FFT) or i.op in SOLVER_ATTRS or i.op in SPECTRAL_ATTRS:
        return DEFAULT, f"TF has no oneDNN kernel for {_CALLS[i.op][2](i)}"
    # a fused ReLU where TF's graph mode runs no oneDNN: oneDNN's ReLU post-op turns NaN
    # into 0 where TF's Relu and its Eigen fused kernel keep it
    nan_keeping_relu = i.op is Op.CONV_BIAS and i.attrs["activation"] != "none" and not onednn
    if i.dtype is dt.BF16:
        small = library_flops(i) < BF16_CALL_FLOPS   # (IR text may have them)
        if onednn and native_bf16 and not small and (i.op is Op.DOT or not _pads_beyond_window(i)):
            return ONEDNN, ("TF runs oneDNN's kernels on this CPU (TF_ENABLE_ONEDNN_OPTS), which "
                            "multiplies bf16 in hardware: oneDNN's bf16 kernel, as graph mode's")
        why = ("TF runs no oneDNN here" if not onednn else "the CPU has no bf16 arithmetic"
               if not native_bf16 else f"under {BF16_CALL_FLOPS} flops oneDNN's bf16 kernel "
               "costs more than the call" if small else "oneDNN refuses this padding")
        return (MEASURED_WITHOUT_ONEDNN if nan_keeping_relu else MEASURED), (
            f"in f32 ({why}; TF's default bf16 kernels are Eigen's slow ones): the operands "
            f"widened, {_WITHOUT_ONEDNN if nan_keeping_relu else _MEASURED}, the result rounded once")
    if i.dtype is not dt.F32:
        return DEFAULT, "oneDNN's kernels take f32, bf16 and f16 only"
    if i.op is not Op.DOT and _pads_beyond_window(i):
        return DEFAULT, "oneDNN refuses padding wider than the filter window"
    if i.op is Op.CONV3D_BIAS:
        return (ONEDNN, "TF's only fused 3-D convolution kernel is oneDNN's (_FusedConv3D, what graph "
                "mode's remapper makes of Conv3D + BiasAdd + Relu where TF runs oneDNN)") if onednn \
            else (MEASURED, f"{_MEASURED}, then the bias and activation in a loop of its own: TF has no "
                  "fused 3-D convolution without oneDNN")
    if nan_keeping_relu:
        return MEASURED_WITHOUT_ONEDNN, (
            "TF's graph mode runs no oneDNN kernels here, and oneDNN's ReLU post-op turns NaN "
            f"into 0 where TF's Relu and its Eigen fused kernel keep it: {_WITHOUT_ONEDNN}")
    if onednn and output_positions(i) >= ONEDNN_SURE_POSITIONS:
        return ONEDNN, ("TF runs oneDNN's kernels on this CPU (TF_ENABLE_ONEDNN_OPTS), and the "
                        f"call has >= {ONEDNN_SURE_POSITIONS} output positions")
    if onednn:
        return MEASURED, (f"{_MEASURED}: under {ONEDNN_SURE_POSITIONS} output positions oneDNN's "
                          "per-call filter reorder can cost more than the convolution")
    return MEASURED, _MEASURED


# What a measured call runs (runtime/kernel_choice.cc, kernel_parts.cc).
_MEASURED = ("the fastest of TF's default and oneDNN kernels and the default one run in parts "
             "side by side (where the call divides), timed over its first calls")
_WITHOUT_ONEDNN = "the fastest of the default kernel whole and in parts, timed over its first calls"


def output_positions(i) -> int:
    """Output positions of a dot or convolution (or of the forward convolution whose
    gradient ``i`` is): the product of its output's dimensions but the last (channels,
    or a dot's columns); the work per filter (or right-hand) element."""
    shape = i.operands[1].shape if i.op in _BACKPROPS else i.shape
    positions = 1
    for d in shape[:-1]:
        positions *= d
    return positions


_BACKPROPS = (Op.CONV_BACKPROP_INPUT, Op.CONV_BACKPROP_FILTER, Op.DEPTHWISE_BACKPROP_INPUT,
              Op.DEPTHWISE_BACKPROP_FILTER, Op.CONV3D_BACKPROP_INPUT, Op.CONV3D_BACKPROP_FILTER)


def _pads_beyond_window(i) -> bool:
    if i.op in CONV3D_OPS or i.op is Op.CONV3D_BIAS:
        window, pads = conv3d_shapes(i)[1][:3], i.attrs["padding"]
        return any(max(pads[2 * d], pads[2 * d + 1]) > window[d] - 1 for d in range(3))
    kh, kw = (i.shape if i.op in (Op.CONV_BACKPROP_FILTER, Op.DEPTHWISE_BACKPROP_FILTER)
              else i.operands[1].shape if i.op in (Op.CONV, Op.CONV_BIAS)
              else i.operands[0].shape)[:2]
    rows, cols = i.attrs.get("dilations", (1, 1))
    top, bottom, left, right = i.attrs["padding"]
    return max(top, bottom) > (kh - 1) * rows or max(left, right) > (kw - 1) * cols


def failure_message(i) -> str:
    """The status message of library call ``i`` when TF's kernel fails (the launch op
    appends TF's own message)."""
    node = f" {{{{node {i.source}}}}}" if i.source else ""
    text = f"TensorFlow's {_CALLS[i.op][2](i)} kernel failed{node}"
    if _CALLS[i.op][0] in ONLY_UNDER_TF:
        text += " (it runs under TfjitLaunch only: tfjit's host runner has no FFT)"
    return text


def emit(module: ir.Module, fusion, plan, name: str, messages: list, onednn: bool,
         prefix: str = "tfjit_rt_", native_bf16: bool = False) -> list:
    """Emits the kernel of one library fusion; returns [(symbol, rows=1, cost)].
    ``messages`` receives the call's failure message (status code k is messages[k-1]);
    ``prefix`` names the entry points (codegen/target.py ``library_prefix``)."""
    (root,) = fusion.roots
    kind, make_args, _ = _CALLS[root.op]
    callee_name = symbol(kind, root.dtype, prefix)
    callee = module.globals.get(callee_name)
    if callee is None:
        tensors = [PTR] * (1 + len(root.operands))
        callee = ir.Function(module, ir.FunctionType(I32, [PTR, I32] + tensors + SIGNATURES[kind]),
                             name=callee_name)
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    bufs = fn.args[0]

    def slot(k):
        return b.load(b.gep(bufs, [i64(k)], source_etype=PTR), typ=PTR)

    slots = plan.slots[root]
    out = slot(slots[0])
    operands = [_operand(b, fusion, o, plan, slot) for o in root.operands]
    family, why = tf_kernel(root, onednn, native_bf16)
    kernel = {DEFAULT: "default", ONEDNN: "oneDNN", MEASURED: "measured",
              MEASURED_WITHOUT_ONEDNN: "measured (no oneDNN)"}[family]
    if prefix == "tfjit_rt_":
        runs = "Conv3D" if root.op is Op.CONV3D_BIAS and family != ONEDNN else _CALLS[root.op][2](root)
        fusion.notes.append(f"runs TF's {kernel} {runs} kernel: {why}")
    else:
        fusion.notes.append(f"calls {callee_name}: linalg.cc's Eigen code, on the calling thread")
    rc = b.call(callee, [slot(plan.device_slot), ir.Constant(I32, family), out, *operands,
                         *make_args(root)])
    text = failure_message(root)
    if text not in messages:
        messages.append(text)
    with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
        b.store(ir.Constant(I32, messages.index(text) + 1), slot(plan.status_slot))
        b.ret_void()
    nbytes = i64(root.size * root.dtype.itemsize)
    for other in slots[1:]:       # the same value is several outputs: copy it
        b.call(_memcpy(module), [slot(other), out, nbytes, ir.Constant(ir.IntType(1), 0)])
    b.ret_void()
    return [(name, 1 if root.size else 0, max(library_flops(root), 1))]   # 0 rows: never called


def _operand(b: ir.IRBuilder, fusion, x, plan, slot):
    """The pointer the call reads operand ``x`` at: its source's buffer (reshapes seen
    through), past the windows of whole rows it is read through (passes/library_operands.py
    ``library_window``: the start computed here, clamped as a dynamic slice's)."""
    offset = None
    while x in fusion.aliases:
        if x.op is Op.DYNAMIC_SLICE:
            data = x.operands[0]
            stride, at = x.dtype.itemsize, i64(0)
            for d in reversed(range(data.rank)):
                start = _scalar(b, x.operands[1 + d], plan, slot)
                limit = i64(data.shape[d] - x.shape[d])
                start = b.select(b.icmp_signed("<", start, i64(0)), i64(0), start)
                start = b.select(b.icmp_signed(">", start, limit), limit, start)
                at = b.add(at, b.mul(start, i64(stride)))
                stride *= data.shape[d]
            offset = at if offset is None else b.add(offset, at)
        x = fusion.aliases[x]
    base = slot(plan.slots[x][0])
    return base if offset is None else b.gep(base, [offset], source_etype=ir.IntType(8))


_PREDICATES = {Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}


def _scalar(b: ir.IRBuilder, s, plan, slot):
    """Integer scalar ``s`` (library_operands.start_leaves' forms) as an i64, a predicate as an i1."""
    if s.op is Op.CONSTANT:
        v = s.value.reshape(-1)[0]
        return ir.Constant(ir.IntType(1), int(bool(v))) if s.dtype.kind == "bool" else i64(int(v))
    if s.op is Op.RESHAPE:
        return _scalar(b, s.operands[0], plan, slot)
    if s.op in _PREDICATES:
        x, y = (_scalar(b, o, plan, slot) for o in s.operands)
        signed = s.operands[0].dtype.is_signed
        return (b.icmp_signed if signed else b.icmp_unsigned)(_PREDICATES[s.op], x, y)
    if s.op is Op.SELECT:
        p, x, y = (_scalar(b, o, plan, slot) for o in s.operands)
        return b.select(p, x, y)
    if s.op in (Op.ADD, Op.SUB, Op.MUL, Op.CONVERT):
        values = [_scalar(b, o, plan, slot) for o in s.operands]
        value = values[0] if s.op is Op.CONVERT else \
            {Op.ADD: b.add, Op.SUB: b.sub, Op.MUL: b.mul}[s.op](*values)
        bits = s.dtype.itemsize * 8         # wraps as the op's own integer type
        if bits < 64:
            value = b.trunc(value, ir.IntType(bits))
            return b.sext(value, I64) if s.dtype.is_signed else b.zext(value, I64)
        return value
    typ = ir.IntType(s.dtype.itemsize * 8)
    value = b.load(slot(plan.slots[s][0]), typ=typ)
    if s.dtype.kind == "bool":
        return b.icmp_unsigned("!=", value, ir.Constant(typ, 0))
    if s.dtype.itemsize == 8:
        return value
    return b.sext(value, I64) if s.dtype.is_signed else b.zext(value, I64)


def _memcpy(module: ir.Module) -> ir.Function:
    name = "llvm.memcpy.p0.p0.i64"
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64, ir.IntType(1)]), name=name)
    return fn


# library calls whose TF kernels reach oneDNN's f32 GEMM (Eigen's contraction kernel calls
# dnnl_sgemm), whose code oneDNN generates at its first call in the process (runtime/warmup.py)
GEMM_OPS = frozenset({Op.DOT, Op.CONV, Op.CONV_BIAS, Op.CONV_BACKPROP_INPUT, Op.CONV_BACKPROP_FILTER,
                      Op.DEPTHWISE_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_FILTER, *CONV3D_OPS,
                      Op.CONV3D_BIAS})


def runs_onednn_gemm(roots) -> bool:
    """Does a module whose library calls have these roots run a kernel on oneDNN's f32
    GEMM?  (Other dtypes' kernels were not measured; they are left as they were.)"""
    return any(r.op in GEMM_OPS and r.dtype == dt.F32 for r in roots)


def call_kind(i) -> str:
    """The runtime entry point (without prefix and dtype) library instruction ``i`` calls."""
    return _CALLS[i.op][0]


def tf_op(i) -> str:
    """The TF op whose kernel library instruction ``i`` runs under the launch op."""
    return _CALLS[i.op][2](i)
