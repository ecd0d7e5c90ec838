"""The tfjit IR's operations: one enum, grouped by kind.

The IR is a small HLO: every instruction has one result with a static shape and
an element type, operands are earlier instructions, and attributes are plain
tuples/ints/strings.  The kind of an op decides how fusion and code generation
treat it:

* ``LEAF``        parameters, constants and iota: no operands.
* ``ELEMENTWISE`` result[i] depends only on operands[i] (same shape throughout).
                  Most take their result type from their operands; those in
                  ``TYPED_RESULT`` carry it as the instruction's type.
* ``MOVEMENT``    result[i] is some operand element (broadcast, reshape, ...):
                  an index mapping, no arithmetic.
* ``REDUCE``      result drops the trailing ``len(dims)`` dimensions of the
                  operand; lowering puts the reduced dimensions last.
* ``LIBRARY``     computed by a call into the runtime library (runtime/tf_kernels.cc:
                  TF's own CPU kernels), as XLA:CPU calls Eigen for dots and
                  convolutions: operands and result are dense buffers in memory,
                  never fused into a loop.
* ``UPDATE``      dynamic-update-slice: the result is its operand with a window
                  overwritten; a kernel of its own that writes only the window when
                  the result may share the operand's buffer (passes/buffers.py).
* ``CONTROL``     control flow (while, conditional) and get-tuple-element.  A
                  while/conditional runs other computations (``Instr.called``:
                  cond and body, or the branches), has a tuple type, and its
                  elements are read through get-tuple-element; operands and
                  elements live in memory (never fused).
* ``GATHER``      result[i] is an element of operand 0 at an index read from
                  operand 1 (a data-dependent index mapping): elemental, so it
                  fuses with producers and consumers like movement does.
* ``SCATTER``     combines rows of operand 0 into the result rows operand 1 names,
                  in input order; ``SCAN`` running sums/products along one dim;
                  ``SORT`` selection along the last dim (top-k).  None of these
                  is computed element by element: each is the root of a kernel
                  shape of its own, whose operands are computed inside it.
"""
from __future__ import annotations

import enum


class Kind(enum.Enum):
    LEAF = "leaf"
    ELEMENTWISE = "elementwise"
    MOVEMENT = "movement"
    REDUCE = "reduce"
    LIBRARY = "library"
    UPDATE = "update"
    CONTROL = "control"
    GATHER = "gather"
    SCATTER = "scatter"
    SCAN = "scan"
    SORT = "sort"


class Op(enum.Enum):
    # leaves
    PARAMETER = ("parameter", Kind.LEAF, 0)
    CONSTANT = ("constant", Kind.LEAF, 0)
    IOTA = ("iota", Kind.LEAF, 0)            # attrs: dim
    # unary elementwise
    NEG = ("negate", Kind.ELEMENTWISE, 1)
    ABS = ("abs", Kind.ELEMENTWISE, 1)
    SIGN = ("sign", Kind.ELEMENTWISE, 1)
    SQRT = ("sqrt", Kind.ELEMENTWISE, 1)
    RSQRT = ("rsqrt", Kind.ELEMENTWISE, 1)
    EXP = ("exp", Kind.ELEMENTWISE, 1)
    EXPM1 = ("expm1", Kind.ELEMENTWISE, 1)
    LOG = ("log", Kind.ELEMENTWISE, 1)
    LOG1P = ("log1p", Kind.ELEMENTWISE, 1)
    SIN = ("sin", Kind.ELEMENTWISE, 1)
    COS = ("cos", Kind.ELEMENTWISE, 1)
    TANH = ("tanh", Kind.ELEMENTWISE, 1)
    LOGISTIC = ("logistic", Kind.ELEMENTWISE, 1)
    SOFTPLUS = ("softplus", Kind.ELEMENTWISE, 1)
    ERF = ("erf", Kind.ELEMENTWISE, 1)
    ASIN = ("asin", Kind.ELEMENTWISE, 1)
    ACOS = ("acos", Kind.ELEMENTWISE, 1)
    ATAN = ("atan", Kind.ELEMENTWISE, 1)
    ATANH = ("atanh", Kind.ELEMENTWISE, 1)
    FLOOR = ("floor", Kind.ELEMENTWISE, 1)
    CEIL = ("ceil", Kind.ELEMENTWISE, 1)
    ROUND_EVEN = ("round-nearest-even", Kind.ELEMENTWISE, 1)
    NOT = ("not", Kind.ELEMENTWISE, 1)
    IS_NAN = ("is-nan", Kind.ELEMENTWISE, 1)
    IS_INF = ("is-inf", Kind.ELEMENTWISE, 1)
    IS_FINITE = ("is-finite", Kind.ELEMENTWISE, 1)
    CONVERT = ("convert", Kind.ELEMENTWISE, 1)   # TF Cast semantics (see codegen)
    BITCAST = ("bitcast-convert", Kind.ELEMENTWISE, 1)   # same-width reinterpretation of the bits
    # the C library's function, called per element (TF's scalar kernels call these:
    # bit-identical to them where tfjit's vectorised mathlib is not); no DAZ on the operand
    LOG_LIBM = ("log-libm", Kind.ELEMENTWISE, 1)
    SIN_LIBM = ("sin-libm", Kind.ELEMENTWISE, 1)
    COS_LIBM = ("cos-libm", Kind.ELEMENTWISE, 1)
    EXPM1_LIBM = ("expm1-libm", Kind.ELEMENTWISE, 1)   # Eigen's complex expm1 calls expm1f/expm1
    # one part of the C library's complex function of (re, im) (csinf/csin ...: TF's
    # complex kernels for these call it per element); ops.COMPLEX_LIBM names them
    CSIN_RE = ("csin-re", Kind.ELEMENTWISE, 2)
    CSIN_IM = ("csin-im", Kind.ELEMENTWISE, 2)
    CCOS_RE = ("ccos-re", Kind.ELEMENTWISE, 2)
    CCOS_IM = ("ccos-im", Kind.ELEMENTWISE, 2)
    CSINH_RE = ("csinh-re", Kind.ELEMENTWISE, 2)
    CSINH_IM = ("csinh-im", Kind.ELEMENTWISE, 2)
    CCOSH_RE = ("ccosh-re", Kind.ELEMENTWISE, 2)
    CCOSH_IM = ("ccosh-im", Kind.ELEMENTWISE, 2)
    CTANH_RE = ("ctanh-re", Kind.ELEMENTWISE, 2)
    CTANH_IM = ("ctanh-im", Kind.ELEMENTWISE, 2)
    CTAN_RE = ("ctan-re", Kind.ELEMENTWISE, 2)
    CTAN_IM = ("ctan-im", Kind.ELEMENTWISE, 2)
    CASIN_RE = ("casin-re", Kind.ELEMENTWISE, 2)
    CASIN_IM = ("casin-im", Kind.ELEMENTWISE, 2)
    CACOS_RE = ("cacos-re", Kind.ELEMENTWISE, 2)
    CACOS_IM = ("cacos-im", Kind.ELEMENTWISE, 2)
    CATAN_RE = ("catan-re", Kind.ELEMENTWISE, 2)
    CATAN_IM = ("catan-im", Kind.ELEMENTWISE, 2)
    CASINH_RE = ("casinh-re", Kind.ELEMENTWISE, 2)
    CASINH_IM = ("casinh-im", Kind.ELEMENTWISE, 2)
    CACOSH_RE = ("cacosh-re", Kind.ELEMENTWISE, 2)
    CACOSH_IM = ("cacosh-im", Kind.ELEMENTWISE, 2)
    CATANH_RE = ("catanh-re", Kind.ELEMENTWISE, 2)
    CATANH_IM = ("catanh-im", Kind.ELEMENTWISE, 2)
    # TF's kernels for these call the C library on every element (Eigen has no vector
    # version), so tfjit calls it too: bit-identical, scalar, CPU only
    TAN = ("tan", Kind.ELEMENTWISE, 1)
    SINH = ("sinh", Kind.ELEMENTWISE, 1)
    COSH = ("cosh", Kind.ELEMENTWISE, 1)
    ASINH = ("asinh", Kind.ELEMENTWISE, 1)
    ACOSH = ("acosh", Kind.ELEMENTWISE, 1)
    # binary elementwise
    ADD = ("add", Kind.ELEMENTWISE, 2)
    SUB = ("subtract", Kind.ELEMENTWISE, 2)
    MUL = ("multiply", Kind.ELEMENTWISE, 2)
    DIV = ("divide", Kind.ELEMENTWISE, 2)        # ints: truncating, checked for /0
    REM = ("remainder", Kind.ELEMENTWISE, 2)     # ints: truncating, checked for /0; floats: fmod
    MAX = ("maximum", Kind.ELEMENTWISE, 2)       # NaN-propagating, ties keep lhs
    MIN = ("minimum", Kind.ELEMENTWISE, 2)
    POW = ("power", Kind.ELEMENTWISE, 2)
    ATAN2 = ("atan2", Kind.ELEMENTWISE, 2)
    AND = ("and", Kind.ELEMENTWISE, 2)           # pred: logical; ints: bitwise
    OR = ("or", Kind.ELEMENTWISE, 2)
    XOR = ("xor", Kind.ELEMENTWISE, 2)
    # shifts (ints only) with TF's rule for the amount y: clamped to [0, bits - 1] (so
    # x << 40 is x << 31 for 32 bits, never LLVM poison); -logical fills with zeros,
    # -arithmetic with the sign bit, whatever the signedness of the type
    SHL = ("shift-left", Kind.ELEMENTWISE, 2)
    SHR_LOGICAL = ("shift-right-logical", Kind.ELEMENTWISE, 2)
    SHR_ARITH = ("shift-right-arithmetic", Kind.ELEMENTWISE, 2)
    EQ = ("compare-eq", Kind.ELEMENTWISE, 2)
    NE = ("compare-ne", Kind.ELEMENTWISE, 2)
    LT = ("compare-lt", Kind.ELEMENTWISE, 2)
    LE = ("compare-le", Kind.ELEMENTWISE, 2)
    GT = ("compare-gt", Kind.ELEMENTWISE, 2)
    GE = ("compare-ge", Kind.ELEMENTWISE, 2)
    # ternary elementwise
    SELECT = ("select", Kind.ELEMENTWISE, 3)
    FMA = ("fma", Kind.ELEMENTWISE, 3)      # x * y + z rounded once (f32): a convolution's taps
    # TF's truncated normal sample (see lower/random.py): operands k0, k1, c0, c1, c2, c3,
    # j (u32): the j-th value with |x| < 2 that TF's Box-Muller transform makes from the
    # Philox4x32-10 stream with key (k0, k1) starting at counter (c0..c3); f32 or f64.
    # Lowering makes j < 4 (f32) or < 2 (f64); a larger j loops on for about j/2 trials
    TRUNCATED_NORMAL = ("truncated-normal", Kind.ELEMENTWISE, 7)
    # TF's special functions, f32/f64: Eigen's scalar Cephes code with its NaN/inf rules
    # (semantics: ir/interp_special.py; code: codegen/special.py, loops calling libm)
    IGAMMA = ("igamma", Kind.ELEMENTWISE, 2)          # a, x: regularised lower P(a, x)
    IGAMMAC = ("igammac", Kind.ELEMENTWISE, 2)        # a, x: upper Q(a, x)
    BETAINC = ("betainc", Kind.ELEMENTWISE, 3)        # a, b, x: regularised I_x(a, b)
    ZETA = ("zeta", Kind.ELEMENTWISE, 2)              # x, q: Hurwitz zeta
    POLYGAMMA = ("polygamma", Kind.ELEMENTWISE, 2)    # n, x
    # unary ones (semantics: ir/interp_special_unary.py; code: codegen/special_unary.py);
    # f16 lowers through f32, as TF's half kernels compute
    LGAMMA = ("lgamma", Kind.ELEMENTWISE, 1)          # the C library's lgamma_r
    DIGAMMA = ("digamma", Kind.ELEMENTWISE, 1)
    NDTRI = ("ndtri", Kind.ELEMENTWISE, 1)            # f32: Eigen's AVX packet code
    ERFINV = ("erfinv", Kind.ELEMENTWISE, 1)          # TF's ndtri(x / 2 + 1 / 2) / sqrt(2)
    BESSEL_I0E = ("bessel-i0e", Kind.ELEMENTWISE, 1)
    BESSEL_I1E = ("bessel-i1e", Kind.ELEMENTWISE, 1)
    # data movement (index mappings)
    BROADCAST = ("broadcast", Kind.MOVEMENT, 1)  # attrs: dims (operand dim d -> result dim dims[d])
    RESHAPE = ("reshape", Kind.MOVEMENT, 1)
    TRANSPOSE = ("transpose", Kind.MOVEMENT, 1)  # attrs: perm (result dim i = operand dim perm[i])
    SLICE = ("slice", Kind.MOVEMENT, 1)          # attrs: starts, strides (may be negative)
    PAD = ("pad", Kind.MOVEMENT, 2)              # operands: x, scalar pad value; attrs: low, high
    CONCAT = ("concatenate", Kind.MOVEMENT, -1)  # attrs: dim
    # reductions over the trailing dims
    REDUCE = ("reduce", Kind.REDUCE, 1)          # attrs: kind (sum|prod|max|min|and|or), ndims
    ARGREDUCE = ("argreduce", Kind.REDUCE, 1)    # attrs: kind (max|min); reduces the last dim
    # runtime-library calls
    DOT = ("dot", Kind.LIBRARY, 2)               # [B,]M,K x [B,]K,N; attrs: transpose_lhs/rhs
    CONV = ("convolution", Kind.LIBRARY, 2)      # NHWC x HWIO; attrs: strides, dilations, padding
    # activation(convolution + bias[channel]) in one call (TF's _FusedConv2D; passes/epilogue.py):
    # x, w, bias [O]; attrs: the convolution's and activation (one of CONV_ACTIVATIONS)
    CONV_BIAS = ("convolution-bias", Kind.LIBRARY, 3)
    # gradients of an undilated convolution (attrs: strides, padding; see module.conv_backprop)
    CONV_BACKPROP_INPUT = ("convolution-backprop-input", Kind.LIBRARY, 2)   # filter, grad -> x
    CONV_BACKPROP_FILTER = ("convolution-backprop-filter", Kind.LIBRARY, 2)  # x, grad -> filter
    DEPTHWISE_BACKPROP_INPUT = ("depthwise-backprop-input", Kind.LIBRARY, 2)
    DEPTHWISE_BACKPROP_FILTER = ("depthwise-backprop-filter", Kind.LIBRARY, 2)
    # undilated 3-D convolution, NDHWC x DHWIO, and its gradients (attrs: strides (3),
    # padding (6): low and high per spatial dim; see module.convolution_3d)
    CONV3D = ("convolution-3d", Kind.LIBRARY, 2)                                # x, w -> y
    CONV3D_BACKPROP_INPUT = ("convolution-3d-backprop-input", Kind.LIBRARY, 2)    # w, grad -> x
    CONV3D_BACKPROP_FILTER = ("convolution-3d-backprop-filter", Kind.LIBRARY, 2)  # x, grad -> w
    # activation(convolution-3d + bias[channel]) in one call (TF's _FusedConv3D; passes/
    # epilogue.py): x, w, bias [O]; attrs: the convolution's and activation
    CONV3D_BIAS = ("convolution-3d-bias", Kind.LIBRARY, 3)
    # Householder QR of x [B, M, N] (Eigen's HouseholderQR, as TF's Qr kernel): one flat
    # result holding Q [B, M, K] then R [B, K, N], K = M (full_matrices) or min(M, N),
    # where packing.qr_parts says
    QR = ("qr", Kind.LIBRARY, 1)                 # attrs: full_matrices
    # dense solvers on square matrices a [B, M, M] (TF's Eigen kernels; module.py's
    # builders give the shapes): b [B, M, N] right-hand sides; adjoint: solve with a^H
    TRIANGULAR_SOLVE = ("triangular-solve", Kind.LIBRARY, 2)   # a, b; attrs: lower, adjoint
    MATRIX_SOLVE = ("matrix-solve", Kind.LIBRARY, 2)           # a, b; attrs: adjoint (LU)
    CHOLESKY = ("cholesky", Kind.LIBRARY, 1)                   # lower factor; NaN if not PD
    MATRIX_INVERSE = ("matrix-inverse", Kind.LIBRARY, 1)       # attrs: adjoint (LU)
    DETERMINANT = ("determinant", Kind.LIBRARY, 1)             # [B]: sign * exp(log |det|)
    # [B] signs then [B] log |det| in one flat result (packing.log_determinant_parts)
    LOG_DETERMINANT = ("log-determinant", Kind.LIBRARY, 1)
    # partially pivoted LU of a [B, M, M] (TF's Lu): one flat result holding the packed
    # factors [B, M, M] then the row permutation [B, M] as exact integers of a's dtype,
    # where packing.lu_parts says
    LU = ("lu", Kind.LIBRARY, 1)
    # least squares of a [B, M, N], b [B, M, K] and the f64 scalar l2 >= 0: x [B, N, K]
    # (TF's MatrixSolveLs: fast, the regularised normal equations by Cholesky; else
    # Eigen's complete orthogonal decomposition, l2 ignored); module.solve_ls
    MATRIX_SOLVE_LS = ("matrix-solve-ls", Kind.LIBRARY, 3)      # a, b, l2; attrs: fast
    # spectral decompositions of x [B, M, N] (TF's Eigen kernels), their parts packed in
    # one flat result where packing.spectral_parts says: SELF_ADJOINT_EIG (M = N, the lower
    # triangle read) the eigenvalues [B, M] ascending, then (compute_v) the eigenvectors
    # [B, M, M] as columns; SVD the singular values [B, K] descending, K = min(M, N), then
    # (compute_uv) U [B, M, P] and V [B, N, Q], P = M, Q = N (full_matrices) or P = Q = K
    SELF_ADJOINT_EIG = ("self-adjoint-eig", Kind.LIBRARY, 1)   # attrs: compute_v
    SVD = ("svd", Kind.LIBRARY, 1)                              # attrs: compute_uv, full_matrices
    # TF's FFT kernels over the last len(fft_length) dims of x [B, dims...] (module.fft):
    # complex values as their real views [..., 2]; attrs: fft_type (FFT_TYPES), fft_length
    FFT = ("fft", Kind.LIBRARY, 1)
    # run-time indices (operands after the first (two): one integer scalar per dim, clamped
    # so the window fits, as HLO's)
    DYNAMIC_SLICE = ("dynamic-slice", Kind.MOVEMENT, -1)               # x, starts...; shape = sizes
    DYNAMIC_UPDATE_SLICE = ("dynamic-update-slice", Kind.UPDATE, -1)   # x, update, starts...
    # control flow (attrs name the called computations)
    WHILE = ("while", Kind.CONTROL, -1)                 # attrs: condition, body
    CONDITIONAL = ("conditional", Kind.CONTROL, -1)     # selector, args...; attrs: branch_computations
    GET_TUPLE_ELEMENT = ("get-tuple-element", Kind.CONTROL, 1)   # attrs: index
    # data-dependent indexing (see module.py's builders for the exact shapes)
    GATHER = ("gather", Kind.GATHER, 2)          # x, indices; attrs: axis, batch_dims
    SCATTER = ("scatter", Kind.SCATTER, -1)      # data[(A,)N,C], ids[N], (init) -> [(A,)S,C]; attrs: kind
    SCAN = ("scan", Kind.SCAN, 1)                # attrs: kind (sum|prod), dim, exclusive, reverse
    TOP_K = ("top-k", Kind.SORT, 1)              # attrs: k; indices of the k largest along the last dim

    def __init__(self, spelling: str, kind: Kind, arity: int):
        self.spelling = spelling
        self.kind = kind
        self.arity = arity   # -1: variadic

    @classmethod
    def from_spelling(cls, spelling: str) -> "Op":
        return _BY_SPELLING[spelling]


_BY_SPELLING = {op.spelling: op for op in Op}

# a fused convolution's activations, each TF's _FusedConv2D's fused_ops after "BiasAdd"
CONV_ACTIVATIONS = ("none", "relu", "relu6")

CONV_BACKPROPS = frozenset({Op.CONV_BACKPROP_INPUT, Op.CONV_BACKPROP_FILTER,
                            Op.DEPTHWISE_BACKPROP_INPUT, Op.DEPTHWISE_BACKPROP_FILTER})

CONV3D_OPS = (Op.CONV3D, Op.CONV3D_BACKPROP_INPUT, Op.CONV3D_BACKPROP_FILTER)

# the dense solvers (module.matrix_op builds them) and the attributes each takes
SOLVER_ATTRS = {Op.TRIANGULAR_SOLVE: ("lower", "adjoint"), Op.MATRIX_SOLVE: ("adjoint",),
                Op.CHOLESKY: (), Op.MATRIX_INVERSE: ("adjoint",), Op.DETERMINANT: (),
                Op.LOG_DETERMINANT: ()}

# the spectral decompositions (module.spectral builds them) and the attributes each takes
SPECTRAL_ATTRS = {Op.SELF_ADJOINT_EIG: ("compute_v",), Op.SVD: ("compute_uv", "full_matrices")}
# Op.FFT's fft_type: complex -> complex forward/inverse, real -> complex, complex -> real
FFT_TYPES = ("fft", "ifft", "rfft", "irfft")

COMPARISONS = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})
SHIFTS = frozenset({Op.SHL, Op.SHR_LOGICAL, Op.SHR_ARITH})
LIBM = frozenset({Op.LOG_LIBM, Op.SIN_LIBM, Op.COS_LIBM, Op.EXPM1_LIBM,
                  Op.TAN, Op.SINH, Op.COSH, Op.ASINH, Op.ACOSH})
# the complex C library ops: op -> (function, part: 0 real, 1 imaginary)
COMPLEX_LIBM = {op: (op.spelling[1:].split("-")[0], int(op.spelling.endswith("-im")))
                for op in Op if op.spelling.endswith(("-re", "-im")) and op.arity == 2}
LIBM = LIBM | frozenset(COMPLEX_LIBM)
SPECIAL = frozenset({Op.IGAMMA, Op.IGAMMAC, Op.BETAINC, Op.ZETA, Op.POLYGAMMA, Op.LGAMMA, Op.DIGAMMA,
                     Op.NDTRI, Op.ERFINV, Op.BESSEL_I0E, Op.BESSEL_I1E})
# elementwise ops whose result type is not their operands' (written as the instruction's type)
TYPED_RESULT = frozenset({Op.CONVERT, Op.BITCAST, Op.TRUNCATED_NORMAL})
REDUCE_KINDS = ("sum", "prod", "max", "min", "and", "or", "maxnum")
# scatter kinds: the segment reductions ("max"/"min": a tie or a NaN takes the later
# value, as TF's segment kernels' cwiseMax(v, acc)), and the variable updates of
# ResourceScatter* ("assign": the later value wins; "max_acc"/"min_acc": a tie or a NaN
# keeps the accumulator, as TF's scatter functors' cwiseMax(acc, v))
SCATTER_KINDS = ("sum", "prod", "max", "min", "sub", "div", "assign", "max_acc", "min_acc")
SCAN_KINDS = ("sum", "prod", "logsumexp")     # logsumexp: floats (CumulativeLogsumexp)
# "maxnum": float max that ignores NaN (-inf when nothing else); only for values whose
# NaNs propagate anyway, such as Softmax's stabilising row max (x - max is NaN there).

# Ops whose per-element cost is high enough that fusion should not duplicate
# them into several consumers that read them at different indices.
EXPENSIVE = frozenset({
    Op.EXP, Op.EXPM1, Op.LOG, Op.LOG1P, Op.SIN, Op.COS, Op.TANH, Op.LOGISTIC,
    Op.SOFTPLUS, Op.ERF, Op.POW, Op.ATAN2, Op.DIV, Op.REM, Op.SQRT, Op.RSQRT,
    Op.ASIN, Op.ACOS, Op.ATAN, Op.ATANH, Op.TRUNCATED_NORMAL,
}) | LIBM | SPECIAL
