// The runtime of tfjit-aot objects: the dot, convolution, QR, solver and eig/SVD entry points their
// library kernels call (tfjit_aot_rt_<kind>_<dtype>, with the arguments of
// tf_kernels.cc's tfjit_rt_* entry points), running linalg.cc's Eigen code on the
// calling thread. aot/runtime.py compiles this file and linalg.cc into a static
// library that needs neither Python nor TensorFlow; the generated header names it.
//
// The runtime context is null (there is no TensorFlow) and the kernel family is
// ignored (there is one kernel). An operand with no elements makes a sum over
// nothing, as in tf_kernels.cc: the result is zeroed here, since linalg.cc's
// functions take non-empty tensors only. Every call but a solver's succeeds
// (returns 0); MatrixSolve/MatrixInverse/Lu of a singular matrix, MatrixSolveLs of a
// refused one and an eigensolver that does not converge return 1.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "linalg.h"

namespace {

template <typename T>
bool ZeroIfEmpty(T* out, int64_t out_size, bool empty) {
  if (empty) std::fill(out, out + out_size, T(0));
  return empty;
}

}  // namespace

#define TFJIT_AOT_DOT(suffix, T)                                                             \
  TFJIT_EXPORT int32_t tfjit_aot_rt_dot_##suffix(void*, int32_t, TFJIT_DOT_PARAMS(T)) {      \
    if (!ZeroIfEmpty(out, batch * m * n, k == 0)) tfjit_linalg_table()->dot_##suffix(TFJIT_DOT_ARGS); \
    return 0;                                                                                 \
  }                                                                                           \
  TFJIT_EXPORT int32_t tfjit_aot_rt_conv2d_##suffix(void*, int32_t, TFJIT_CONV2D_PARAMS(T)) { \
    if (!ZeroIfEmpty(out, batch * out_rows * out_cols * out_depth,                            \
                     in_rows == 0 || in_cols == 0 || in_depth == 0 || filter_rows == 0 ||     \
                         filter_cols == 0))                                                   \
      tfjit_linalg_table()->conv2d_##suffix(TFJIT_CONV2D_ARGS);                               \
    return 0;                                                                                 \
  }

// activation(convolution + bias): the plain convolution, then the bias and activation
#define TFJIT_AOT_CONV_BIAS(suffix, T)                                                          \
  TFJIT_EXPORT int32_t tfjit_aot_rt_conv2d_bias_##suffix(void*, int32_t,                       \
                                                         TFJIT_CONV2D_BIAS_PARAMS(T)) {        \
    tfjit_aot_rt_conv2d_##suffix(nullptr, 0, TFJIT_CONV2D_ARGS);                                \
    TfjitBiasActivation(out, bias, batch * out_rows * out_cols, out_depth, activation);        \
    return 0;                                                                                 \
  }

// a: the filter (..._input) or the input (..._filter); the output gradient has
// out_depth = in_depth * filter_depth channels (depthwise) or filter_depth
#define TFJIT_AOT_BACKPROP(name, of_input, depthwise, suffix, T)                                \
  TFJIT_EXPORT int32_t tfjit_aot_rt_##name##_##suffix(void*, int32_t, TFJIT_BACKPROP_PARAMS(T)) { \
    const int64_t out_depth = depthwise ? in_depth * filter_depth : filter_depth;               \
    const int64_t filter_size = filter_rows * filter_cols * in_depth * filter_depth;            \
    const int64_t input_size = batch * in_rows * in_cols * in_depth;                            \
    if (!ZeroIfEmpty(out, of_input ? input_size : filter_size,                                  \
                     (of_input ? filter_size : input_size) == 0 || batch == 0 ||             \
                         out_rows == 0 || out_cols == 0 || out_depth == 0))                      \
      tfjit_linalg_table()->name##_##suffix(TFJIT_BACKPROP_ARGS);                               \
    return 0;                                                                                    \
  }

#define TFJIT_AOT_QR(suffix, T)                                                  \
  TFJIT_EXPORT int32_t tfjit_aot_rt_qr_##suffix(void*, int32_t, TFJIT_QR_PARAMS(T)) { \
    tfjit_linalg_table()->qr_##suffix(TFJIT_QR_ARGS);                                \
    return 0;                                                                        \
  }

#define TFJIT_AOT_SOLVER(name, suffix, T)                                                      \
  TFJIT_EXPORT int32_t tfjit_aot_rt_##name##_##suffix(void*, int32_t, TFJIT_SOLVE_PARAMS(T)) {   \
    return tfjit_linalg_table()->name##_##suffix(TFJIT_SOLVE_ARGS);                             \
  }
#define TFJIT_AOT_OF_MATRIX(name, suffix, T)                                                   \
  TFJIT_EXPORT int32_t tfjit_aot_rt_##name##_##suffix(void*, int32_t, TFJIT_MATRIX_PARAMS(T)) {  \
    return tfjit_linalg_table()->name##_##suffix(TFJIT_MATRIX_ARGS);                            \
  }

#define TFJIT_AOT_SPECTRAL(name, suffix, T)                                                    \
  TFJIT_EXPORT int32_t tfjit_aot_rt_##name##_##suffix(void*, int32_t, TFJIT_SPECTRAL_PARAMS(T)) { \
    return tfjit_linalg_table()->name##_##suffix(TFJIT_SPECTRAL_ARGS);                          \
  }

#define TFJIT_AOT_SOLVE_LS(suffix, T)                                                          \
  TFJIT_EXPORT int32_t tfjit_aot_rt_matrix_solve_ls_##suffix(void*, int32_t,                    \
                                                             TFJIT_SOLVE_LS_PARAMS(T)) {        \
    return tfjit_linalg_table()->matrix_solve_ls_##suffix(TFJIT_SOLVE_LS_ARGS);                 \
  }

#define TFJIT_AOT_LU(suffix, T)                                                                \
  TFJIT_EXPORT int32_t tfjit_aot_rt_lu_##suffix(void*, int32_t, TFJIT_LU_PARAMS(T)) {            \
    return tfjit_linalg_table()->lu_##suffix(TFJIT_LU_ARGS);                                     \
  }

// the 3-D convolutions: `kind` 0 forward (out is y), 1 input gradient (dx), 2 filter gradient (dw)
#define TFJIT_AOT_CONV3D(name, kind, suffix, T)                                                 \
  TFJIT_EXPORT int32_t tfjit_aot_rt_##name##_##suffix(void*, int32_t, TFJIT_CONV3D_PARAMS(T)) {  \
    const int64_t x_size = batch * in_planes * in_rows * in_cols * in_depth;                    \
    const int64_t w_size = filter_planes * filter_rows * filter_cols * in_depth * out_depth;    \
    const int64_t y_size = batch * out_planes * out_rows * out_cols * out_depth;                \
    if (!ZeroIfEmpty(out, kind == 0 ? y_size : kind == 1 ? x_size : w_size,                    \
                     x_size == 0 || w_size == 0 || y_size == 0))                                \
      tfjit_linalg_table()->name##_##suffix(TFJIT_CONV3D_ARGS);                                 \
    return 0;                                                                                    \
  }

#define TFJIT_AOT_DEFINE(suffix, T)                                                  \
  TFJIT_AOT_DOT(suffix, T)                                                           \
  TFJIT_AOT_QR(suffix, T)                                                            \
  TFJIT_AOT_SOLVER(triangular_solve, suffix, T)                                      \
  TFJIT_AOT_SOLVER(matrix_solve, suffix, T)                                          \
  TFJIT_AOT_OF_MATRIX(cholesky, suffix, T)                                           \
  TFJIT_AOT_OF_MATRIX(matrix_inverse, suffix, T)                                     \
  TFJIT_AOT_OF_MATRIX(determinant, suffix, T)                                        \
  TFJIT_AOT_OF_MATRIX(log_determinant, suffix, T)                                    \
  TFJIT_AOT_LU(suffix, T)                                                            \
  TFJIT_AOT_SOLVE_LS(suffix, T)                                                      \
  TFJIT_AOT_SPECTRAL(self_adjoint_eig, suffix, T)                                    \
  TFJIT_AOT_SPECTRAL(svd, suffix, T)                                                 \
  TFJIT_AOT_BACKPROP(conv2d_backprop_input, true, false, suffix, T)                  \
  TFJIT_AOT_BACKPROP(conv2d_backprop_filter, false, false, suffix, T)                \
  TFJIT_AOT_BACKPROP(depthwise_backprop_input, true, true, suffix, T)                \
  TFJIT_AOT_BACKPROP(depthwise_backprop_filter, false, true, suffix, T)              \
  TFJIT_AOT_CONV_BIAS(suffix, T)                                                     \
  TFJIT_AOT_CONV3D(conv3d, 0, suffix, T)                                             \
  TFJIT_AOT_CONV3D(conv3d_backprop_input, 1, suffix, T)                              \
  TFJIT_AOT_CONV3D(conv3d_backprop_filter, 2, suffix, T)                            \
  TFJIT_EXPORT int32_t tfjit_aot_rt_conv3d_bias_##suffix(void*, int32_t,              \
                                                         TFJIT_CONV3D_BIAS_PARAMS(T)) { \
    tfjit_aot_rt_conv3d_##suffix(nullptr, 0, TFJIT_CONV3D_ARGS);                       \
    TfjitBiasActivation(out, bias, batch * out_planes * out_rows * out_cols, out_depth, \
                        activation);                                                   \
    return 0;                                                                           \
  }

TFJIT_AOT_DEFINE(f32, float)
TFJIT_AOT_DEFINE(f64, double)

// the bf16 products and convolutions (passes/dots.py Bf16Products): the operands
// widened to f32, the f32 call, the result rounded once (as tf_bf16.cc without oneDNN)
template <typename Call>
int32_t ViaF32(uint16_t* out, int64_t out_size, const uint16_t* a, int64_t a_size,
               const uint16_t* b, int64_t b_size, Call call) {
  std::vector<float> wa(a_size), wb(b_size), wc(out_size);
  for (int64_t i = 0; i < a_size; ++i) wa[i] = TfjitBf16ToF32(a[i]);
  for (int64_t i = 0; i < b_size; ++i) wb[i] = TfjitBf16ToF32(b[i]);
  const int32_t rc = call(wc.data(), wa.data(), wb.data());
  for (int64_t i = 0; i < out_size; ++i) out[i] = TfjitF32ToBf16(wc[i]);
  return rc;
}

TFJIT_EXPORT int32_t tfjit_aot_rt_dot_bf16(void*, int32_t, TFJIT_DOT_PARAMS(uint16_t)) {
  return ViaF32(out, batch * m * n, lhs, lhs_stride != 0 ? batch * lhs_stride : m * k, rhs,
                rhs_stride != 0 ? batch * rhs_stride : k * n,
                [&](float* o, const float* a, const float* b) {
                  return tfjit_aot_rt_dot_f32(nullptr, 0, o, a, b, batch, lhs_stride, rhs_stride,
                                              m, n, k, transpose_lhs, transpose_rhs);
                });
}

TFJIT_EXPORT int32_t tfjit_aot_rt_conv2d_bf16(void*, int32_t, TFJIT_CONV2D_PARAMS(uint16_t)) {
  return ViaF32(out, batch * out_rows * out_cols * out_depth, input,
                batch * in_rows * in_cols * in_depth, filter,
                filter_rows * filter_cols * in_depth * out_depth,
                [&](float* o, const float* x, const float* w) {
                  return tfjit_aot_rt_conv2d_f32(
                      nullptr, 0, o, x, w, batch, in_rows, in_cols, in_depth, filter_rows,
                      filter_cols, out_depth, out_rows, out_cols, row_stride, col_stride,
                      row_dilation, col_dilation, pad_top, pad_bottom, pad_left, pad_right);
                });
}

TFJIT_EXPORT int32_t tfjit_aot_rt_conv2d_bias_bf16(void*, int32_t,
                                                   TFJIT_CONV2D_BIAS_PARAMS(uint16_t)) {
  std::vector<float> wide_bias(out_depth);
  for (int64_t c = 0; c < out_depth; ++c) wide_bias[c] = TfjitBf16ToF32(bias[c]);
  return ViaF32(out, batch * out_rows * out_cols * out_depth, input,
                batch * in_rows * in_cols * in_depth, filter,
                filter_rows * filter_cols * in_depth * out_depth,
                [&](float* o, const float* x, const float* w) {
                  return tfjit_aot_rt_conv2d_bias_f32(
                      nullptr, 0, o, x, w, wide_bias.data(), batch, in_rows, in_cols, in_depth,
                      filter_rows, filter_cols, out_depth, out_rows, out_cols, row_stride,
                      col_stride, row_dilation, col_dilation, pad_top, pad_bottom, pad_left,
                      pad_right, activation);
                });
}

#define TFJIT_AOT_BACKPROP_BF16(name, of_input)                                                   \
  TFJIT_EXPORT int32_t tfjit_aot_rt_##name##_bf16(void*, int32_t, TFJIT_BACKPROP_PARAMS(uint16_t)) { \
    const int64_t x_size = batch * in_rows * in_cols * in_depth;                                  \
    const int64_t w_size = filter_rows * filter_cols * in_depth * filter_depth;                   \
    return ViaF32(out, of_input ? x_size : w_size, a, of_input ? w_size : x_size, grad,           \
                  batch * out_rows * out_cols * filter_depth,                                     \
                  [&](float* o, const float* wa, const float* g) {                                \
                    return tfjit_aot_rt_##name##_f32(                                             \
                        nullptr, 0, o, wa, g, batch, in_rows, in_cols, in_depth, filter_rows,     \
                        filter_cols, filter_depth, out_rows, out_cols, row_stride, col_stride,    \
                        pad_top, pad_bottom, pad_left, pad_right);                                \
                  });                                                                             \
  }
TFJIT_AOT_BACKPROP_BF16(conv2d_backprop_input, true)
TFJIT_AOT_BACKPROP_BF16(conv2d_backprop_filter, false)

// kind: 0 the convolution (a: x, b: the filter), 1 the input gradient (a: the filter, b:
// the output's gradient), 2 the filter gradient (a: x, b: the output's gradient)
#define TFJIT_AOT_CONV3D_BF16(name, kind)                                                         \
  TFJIT_EXPORT int32_t tfjit_aot_rt_##name##_bf16(void*, int32_t, TFJIT_CONV3D_PARAMS(uint16_t)) { \
    const int64_t x_size = batch * in_planes * in_rows * in_cols * in_depth;                     \
    const int64_t w_size = filter_planes * filter_rows * filter_cols * in_depth * out_depth;     \
    const int64_t y_size = batch * out_planes * out_rows * out_cols * out_depth;                 \
    return ViaF32(out, kind == 0 ? y_size : kind == 1 ? x_size : w_size, a,                     \
                  kind == 1 ? w_size : x_size, b, kind == 0 ? w_size : y_size,                 \
                  [&](float* o, const float* wa, const float* wb) {                              \
                    return tfjit_aot_rt_##name##_f32(nullptr, 0, o, wa, wb,                       \
                                                     TFJIT_CONV3D_SIZE_ARGS);                     \
                  });                                                                            \
  }
TFJIT_AOT_CONV3D_BF16(conv3d, 0)
TFJIT_AOT_CONV3D_BF16(conv3d_backprop_input, 1)
TFJIT_AOT_CONV3D_BF16(conv3d_backprop_filter, 2)
