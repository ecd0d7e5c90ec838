// The runtime library's own Eigen code (linalg.cc), called by tf_kernels.cc
// where there is no TensorFlow kernel to run (the host runner). Single-threaded, on the calling
// thread. The parameters are those of tf_kernels.cc's tfjit_rt_* entry points
// after the runtime context (see there for their meaning).
#ifndef TFJIT_RUNTIME_LINALG_H_
#define TFJIT_RUNTIME_LINALG_H_

#include <cstdint>

#define TFJIT_EXPORT extern "C" __attribute__((visibility("default")))

#define TFJIT_DOT_PARAMS(T)                                                                \
  T *out, const T *lhs, const T *rhs, int64_t batch, int64_t lhs_stride, int64_t rhs_stride, \
      int64_t m, int64_t n, int64_t k, int32_t transpose_lhs, int32_t transpose_rhs
#define TFJIT_DOT_ARGS \
  out, lhs, rhs, batch, lhs_stride, rhs_stride, m, n, k, transpose_lhs, transpose_rhs

// Convolutions: NHWC input/output/gradient, filter [filter_rows, filter_cols,
// in_depth, filter_depth] (HWIO; filter_depth is the depth multiplier of a
// depthwise filter), explicit zero padding.
#define TFJIT_CONV2D_PARAMS(T)                                                                  \
  T *out, const T *input, const T *filter, int64_t batch, int64_t in_rows, int64_t in_cols,      \
      int64_t in_depth, int64_t filter_rows, int64_t filter_cols, int64_t out_depth,             \
      int64_t out_rows, int64_t out_cols, int64_t row_stride, int64_t col_stride,                \
      int64_t row_dilation, int64_t col_dilation, int64_t pad_top, int64_t pad_bottom,           \
      int64_t pad_left, int64_t pad_right
#define TFJIT_CONV2D_ARGS                                                                   \
  out, input, filter, batch, in_rows, in_cols, in_depth, filter_rows, filter_cols, out_depth, \
      out_rows, out_cols, row_stride, col_stride, row_dilation, col_dilation, pad_top,        \
      pad_bottom, pad_left, pad_right

// A convolution with its bias and activation fused (_FusedConv2D): the convolution's
// parameters with the bias [out_depth] after the filter, then the activation.
#define TFJIT_CONV2D_BIAS_PARAMS(T)                                                          \
  T *out, const T *input, const T *filter, const T *bias, int64_t batch, int64_t in_rows,     \
      int64_t in_cols, int64_t in_depth, int64_t filter_rows, int64_t filter_cols,            \
      int64_t out_depth, int64_t out_rows, int64_t out_cols, int64_t row_stride,              \
      int64_t col_stride, int64_t row_dilation, int64_t col_dilation, int64_t pad_top,        \
      int64_t pad_bottom, int64_t pad_left, int64_t pad_right, int32_t activation

// bfloat16 <-> float as TF converts (Eigen's: round to nearest even, a NaN stays NaN),
// on the raw 16 bits: the bf16 product widened where no bf16 kernel runs it
// (tf_bf16.cc, aot_runtime.cc).
inline float TfjitBf16ToF32(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t TfjitF32ToBf16(float f) {    // branch-free: loops over it vectorise
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

// The activations (codegen/library.py ACTIVATION_CODES) and TF's fused_ops naming them.
enum TfjitActivation : int32_t { kTfjitNoActivation = 0, kTfjitRelu = 1, kTfjitRelu6 = 2 };

// out[p, c] = activation(out[p, c] + bias[c]) over `positions` rows of `depth`: what
// the fused call adds to a plain convolution where no TF kernel runs it (the host
// runner, tfjit-aot), as the interpreter computes it (max/min keep a NaN, and
// max(-0, 0) is -0, the IR's maximum).
template <typename T>
inline void TfjitBiasActivation(T* out, const T* bias, int64_t positions, int64_t depth,
                                int32_t activation) {
  for (int64_t p = 0; p < positions; ++p) {
    T* row = out + p * depth;
    for (int64_t c = 0; c < depth; ++c) {
      T v = row[c] + bias[c];
      if (activation != kTfjitNoActivation && !(v >= T(0) || v != v)) v = T(0);
      if (activation == kTfjitRelu6 && !(v <= T(6) || v != v)) v = T(6);
      row[c] = v;
    }
  }
}

// Gradients (no dilation): `a` is the filter (..._input: out is dx) or the
// forward input (..._filter: out is dw); `grad` is the output gradient.
#define TFJIT_BACKPROP_PARAMS(T)                                                              \
  T *out, const T *a, const T *grad, int64_t batch, int64_t in_rows, int64_t in_cols,          \
      int64_t in_depth, int64_t filter_rows, int64_t filter_cols, int64_t filter_depth,        \
      int64_t out_rows, int64_t out_cols, int64_t row_stride, int64_t col_stride,              \
      int64_t pad_top, int64_t pad_bottom, int64_t pad_left, int64_t pad_right
#define TFJIT_BACKPROP_ARGS                                                                   \
  out, a, grad, batch, in_rows, in_cols, in_depth, filter_rows, filter_cols, filter_depth,     \
      out_rows, out_cols, row_stride, col_stride, pad_top, pad_bottom, pad_left, pad_right

// 3-D convolutions, undilated: NDHWC input/output/gradient, filter [filter_planes,
// filter_rows, filter_cols, in_depth, out_depth] (DHWIO), explicit zero padding.
// `a` and `b` are the input and the filter (conv3d: out is the NDHWC result), the
// filter and the output gradient (conv3d_backprop_input: out is dx), or the input and
// the output gradient (conv3d_backprop_filter: out is dw).
#define TFJIT_CONV3D_SIZES                                                                    \
  int64_t batch, int64_t in_planes, int64_t in_rows, int64_t in_cols, int64_t in_depth,        \
      int64_t filter_planes, int64_t filter_rows, int64_t filter_cols, int64_t out_depth,      \
      int64_t out_planes, int64_t out_rows, int64_t out_cols, int64_t plane_stride,            \
      int64_t row_stride, int64_t col_stride, int64_t pad_front, int64_t pad_back,             \
      int64_t pad_top, int64_t pad_bottom, int64_t pad_left, int64_t pad_right
#define TFJIT_CONV3D_PARAMS(T) T *out, const T *a, const T *b, TFJIT_CONV3D_SIZES
#define TFJIT_CONV3D_SIZE_ARGS                                                                \
  batch, in_planes, in_rows, in_cols, in_depth, filter_planes, filter_rows, filter_cols,        \
      out_depth, out_planes, out_rows, out_cols, plane_stride, row_stride, col_stride,          \
      pad_front, pad_back, pad_top, pad_bottom, pad_left, pad_right
#define TFJIT_CONV3D_ARGS out, a, b, TFJIT_CONV3D_SIZE_ARGS

// A 3-D convolution with its bias [out_depth] and activation fused (_FusedConv3D):
// the bias after the filter, the activation last.
#define TFJIT_CONV3D_BIAS_PARAMS(T) \
  T *out, const T *a, const T *b, const T *bias, TFJIT_CONV3D_SIZES, int32_t activation

// QR of the matrices x [batch, m, n] (m, n > 0): out holds Q [batch, m, k], then
// R [batch, k, n] from TfjitQrROffset (64-byte aligned, as TF's tensors must be),
// with k = m when full_matrices, else min(m, n) (ir/packing.py's qr_parts).
#define TFJIT_QR_PARAMS(T) \
  T *out, const T *x, int64_t batch, int64_t m, int64_t n, int32_t full_matrices
#define TFJIT_QR_ARGS out, x, batch, m, n, full_matrices

inline int64_t TfjitQrROffset(int64_t batch, int64_t m, int64_t n, int32_t full_matrices) {
  const int64_t k = full_matrices ? m : (m < n ? m : n);
  return (batch * m * k + 15) / 16 * 16;
}

// The dense solvers, on the square matrices a [batch, m, m] (batch, m > 0):
//   triangular_solve, matrix_solve: out [batch, m, n] = op(a)^-1 b, b [batch, m, n]
//     (n > 0); op(a) = a^T when `adjoint`; triangular_solve reads a's lower
//     (`lower`) or upper triangle only, matrix_solve ignores `lower`.
//   cholesky: out [batch, m, m], the lower factor (NaN lower triangle where a is not
//     positive definite, as TF's kernel); matrix_inverse: out = op(a)^-1;
//   determinant: out [batch]; log_determinant: the signs [batch], then log |det|
//     [batch] from TfjitLogDetOffset (ir/packing.py's log_determinant_parts).
// Each returns 0, or 1 where TF's kernel fails: matrix_solve and matrix_inverse on a
// matrix whose LU has an exact zero pivot ("not invertible").
#define TFJIT_SOLVE_PARAMS(T)                                                             \
  T *out, const T *a, const T *b, int64_t batch, int64_t m, int64_t n, int32_t lower,     \
      int32_t adjoint
#define TFJIT_SOLVE_ARGS out, a, b, batch, m, n, lower, adjoint
#define TFJIT_MATRIX_PARAMS(T) T *out, const T *a, int64_t batch, int64_t m, int32_t adjoint
#define TFJIT_MATRIX_ARGS out, a, batch, m, adjoint

inline int64_t TfjitLogDetOffset(int64_t batch) { return (batch + 15) / 16 * 16; }

// lu: the partially pivoted LU of a [batch, m, m] (m > 0) as TF's Lu: out holds the
// packed factors [batch, m, m] (L's strictly lower triangle, unit diagonal implied;
// U's upper), then from TfjitLuPermOffset the permutations [batch, m] as exact
// integers of T (row i of P a is row perm[i] of a). Returns 1 where TF's kernel fails:
// an exact zero pivot ("Input is not invertible.").
#define TFJIT_LU_PARAMS(T) T *out, const T *a, int64_t batch, int64_t m
#define TFJIT_LU_ARGS out, a, batch, m

inline int64_t TfjitLuPermOffset(int64_t batch, int64_t m) { return (batch * m * m + 15) / 16 * 16; }

// matrix_solve_ls: out [batch, n, k] = the least-squares solutions of a [batch, m, n]
// x = b [batch, m, k] (all non-empty) with the f64 scalar *l2 >= 0 as TF's
// MatrixSolveLs: `fast`, the regularised normal equations (of the second kind when
// m < n) by Cholesky; else Eigen's complete orthogonal decomposition (l2 ignored).
// Returns 1 where TF's kernel fails: l2 < 0, or (fast) a Cholesky that fails.
#define TFJIT_SOLVE_LS_PARAMS(T)                                                              \
  T *out, const T *a, const T *b, const double *l2, int64_t batch, int64_t m, int64_t n,       \
      int64_t k, int32_t fast
#define TFJIT_SOLVE_LS_ARGS out, a, b, l2, batch, m, n, k, fast

// The spectral decompositions of x [batch, m, n] (batch, m, n > 0), their parts packed
// in `out`, each from a multiple of 16 elements (TfjitSpectralOffsets; ir/packing.py's
// spectral_parts):
//   self_adjoint_eig (m == n, the lower triangle read): the eigenvalues [batch, m]
//     ascending, then (`vectors`: compute_v) the eigenvectors [batch, m, m] as columns;
//     `full_matrices` is ignored.
//   svd: the singular values [batch, k] descending, k = min(m, n), then (`vectors`:
//     compute_uv) U [batch, m, p] and V [batch, n, q], p = m and q = n when
//     `full_matrices`, else p = q = k.
// Each returns 0, or 1 where TF's kernel fails: self_adjoint_eig where Eigen's solver
// does not converge (a NaN or inf input).
#define TFJIT_SPECTRAL_PARAMS(T) \
  T *out, const T *x, int64_t batch, int64_t m, int64_t n, int32_t vectors, int32_t full_matrices
#define TFJIT_SPECTRAL_ARGS out, x, batch, m, n, vectors, full_matrices

// The offsets of the second and third parts (U and V, or the eigenvectors and none).
inline void TfjitSpectralOffsets(int64_t batch, int64_t m, int64_t n, int32_t full_matrices,
                                 int64_t* second, int64_t* third) {
  const int64_t k = m < n ? m : n;
  *second = (batch * k + 15) / 16 * 16;
  *third = (*second + batch * m * (full_matrices ? m : k) + 15) / 16 * 16;
}

// The host library (linalg.cc, a shared library of its own, built when a host
// run first needs it) hands the op library its functions in one table:
// tfjit_linalg_table() returns it, and tfjit_rt_set_linalg (tf_kernels.cc)
// takes it. `size` is a handshake: a table of another layout (a stale build)
// is refused.
template <typename T>
using TfjitDotFn = void (*)(TFJIT_DOT_PARAMS(T));
template <typename T>
using TfjitConv2DFn = void (*)(TFJIT_CONV2D_PARAMS(T));
template <typename T>
using TfjitBackpropFn = void (*)(TFJIT_BACKPROP_PARAMS(T));
template <typename T>
using TfjitConv3DFn = void (*)(TFJIT_CONV3D_PARAMS(T));
template <typename T>
using TfjitQrFn = void (*)(TFJIT_QR_PARAMS(T));
template <typename T>
using TfjitSolveFn = int32_t (*)(TFJIT_SOLVE_PARAMS(T));
template <typename T>
using TfjitMatrixFn = int32_t (*)(TFJIT_MATRIX_PARAMS(T));
template <typename T>
using TfjitLuFn = int32_t (*)(TFJIT_LU_PARAMS(T));
template <typename T>
using TfjitSolveLsFn = int32_t (*)(TFJIT_SOLVE_LS_PARAMS(T));
template <typename T>
using TfjitSpectralFn = int32_t (*)(TFJIT_SPECTRAL_PARAMS(T));

#define TFJIT_LINALG_FIELDS(suffix, T)                   \
  TfjitDotFn<T> dot_##suffix;                            \
  TfjitConv2DFn<T> conv2d_##suffix;                      \
  TfjitBackpropFn<T> conv2d_backprop_input_##suffix;     \
  TfjitBackpropFn<T> conv2d_backprop_filter_##suffix;    \
  TfjitBackpropFn<T> depthwise_backprop_input_##suffix;  \
  TfjitBackpropFn<T> depthwise_backprop_filter_##suffix; \
  TfjitQrFn<T> qr_##suffix;                              \
  TfjitSolveFn<T> triangular_solve_##suffix;             \
  TfjitSolveFn<T> matrix_solve_##suffix;                 \
  TfjitMatrixFn<T> cholesky_##suffix;                    \
  TfjitMatrixFn<T> matrix_inverse_##suffix;              \
  TfjitMatrixFn<T> determinant_##suffix;                 \
  TfjitMatrixFn<T> log_determinant_##suffix;            \
  TfjitLuFn<T> lu_##suffix;                              \
  TfjitSolveLsFn<T> matrix_solve_ls_##suffix;            \
  TfjitSpectralFn<T> self_adjoint_eig_##suffix;          \
  TfjitSpectralFn<T> svd_##suffix;                       \
  TfjitConv3DFn<T> conv3d_##suffix;                      \
  TfjitConv3DFn<T> conv3d_backprop_input_##suffix;       \
  TfjitConv3DFn<T> conv3d_backprop_filter_##suffix;

struct TfjitLinalg {
  int64_t size;   // sizeof(TfjitLinalg) where the table was filled
  TFJIT_LINALG_FIELDS(f32, float)
  TFJIT_LINALG_FIELDS(f64, double)
};

TFJIT_EXPORT const TfjitLinalg* tfjit_linalg_table();

#endif  // TFJIT_RUNTIME_LINALG_H_
