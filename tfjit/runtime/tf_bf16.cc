// The runtime library's bfloat16 products and convolutions (called as tf_kernels.cc's
// entry points are, by codegen/library.py; passes/dots.py Bf16Products makes the calls,
// where the target runs oneDNN on a CPU that multiplies bf16, for calls of 2^23 flops
// and more):
//   tfjit_rt_dot_bf16(runtime, kernel, TFJIT_DOT_PARAMS(bf16))
//   tfjit_rt_conv2d_bf16(runtime, kernel, TFJIT_CONV2D_PARAMS(bf16))
//   tfjit_rt_conv2d_bias_bf16(runtime, kernel, TFJIT_CONV2D_BIAS_PARAMS(bf16)): the
//     convolution with its bias and activation (passes/epilogue.py folds them), summed,
//     added and clamped in f32 and rounded once (oneDNN's _FusedConv2D in bf16)
//   tfjit_rt_conv2d_backprop_{input,filter}_bf16(runtime, kernel, TFJIT_BACKPROP_PARAMS(bf16))
//   tfjit_rt_conv3d{,_backprop_input,_backprop_filter}_bf16(runtime, kernel,
//     TFJIT_CONV3D_PARAMS(bf16))
// `kernel` kOneDnn: TF's bf16 MatMul/BatchMatMulV2, Conv2D (_FusedConv2D),
// Conv2DBackpropInput/Filter, Conv3D, Conv3DBackpropInputV2/FilterV2 on oneDNN's
// kernels, what graph mode runs (AVX512-BF16 or AMX). Any other family, or
// the host runner (IR text with bf16 calls, a call oneDNN refuses): the operands are
// widened to f32 (exactly), the f32 call runs as its tfjit_rt_*_f32 entry runs it, and
// the result is rounded to bf16 once, the arithmetic of the converts around an f32 call
// that the pass replaced (which, fused with their producers and readers, are faster:
// the pass makes no bf16 call where this path would run). The widening and rounding
// loops are split over the launch's intra-op pool.

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "linalg.h"
#include "runtime.h"
#include "tf_kernels.h"

namespace tensorflow {
namespace tfjit {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], FreeDeleter>;

// n floats, 64-byte aligned as TF's tensors are (or null where n is 0)
Floats AlignedFloats(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  return Floats(bytes == 0 ? nullptr : static_cast<float*>(std::aligned_alloc(64, bytes)));
}

struct Convert {
  const uint16_t* bf16_in;   // widen: bf16_in -> f32_out
  const float* f32_in;       // round: f32_in -> bf16_out
  float* f32_out;
  uint16_t* bf16_out;
};

void Widen(void** job, int64_t begin, int64_t end) {
  const auto* c = reinterpret_cast<const Convert*>(job);
  for (int64_t i = begin; i < end; ++i) c->f32_out[i] = TfjitBf16ToF32(c->bf16_in[i]);
}

void Round(void** job, int64_t begin, int64_t end) {
  const auto* c = reinterpret_cast<const Convert*>(job);
  for (int64_t i = begin; i < end; ++i) c->bf16_out[i] = TfjitF32ToBf16(c->f32_in[i]);
}

void Split(void* runtime, TfjitKernelFn fn, Convert* job, int64_t n) {
  const DeviceBase::CpuWorkerThreads* workers =
      runtime == nullptr ? nullptr
                         : static_cast<RuntimeContext*>(runtime)->ctx->device()->tensorflow_cpu_worker_threads();
  if (workers == nullptr) {
    fn(reinterpret_cast<void**>(job), 0, n);
  } else {
    RunSplit(workers, fn, reinterpret_cast<void**>(job), n, 1);
  }
}

// Runs `call(out, a, b)` (an f32 call of any family, or on the host library) on the
// operands a [a_size] and b [b_size] widened to f32, and rounds its result [out_size].
template <typename Call>
int32_t ViaF32(void* runtime, bfloat16* out, int64_t out_size, const bfloat16* a, int64_t a_size,
               const bfloat16* b, int64_t b_size, Call call) {
  const Floats wa = AlignedFloats(a_size), wb = AlignedFloats(b_size), wc = AlignedFloats(out_size);
  Convert widen_a{reinterpret_cast<const uint16_t*>(a), nullptr, wa.get(), nullptr};
  Convert widen_b{reinterpret_cast<const uint16_t*>(b), nullptr, wb.get(), nullptr};
  Split(runtime, Widen, &widen_a, a_size);
  Split(runtime, Widen, &widen_b, b_size);
  const int32_t rc = call(wc.get(), wa.get(), wb.get());
  if (rc != 0) return rc;
  Convert round{nullptr, wc.get(), nullptr, reinterpret_cast<uint16_t*>(out)};
  Split(runtime, Round, &round, out_size);
  return 0;
}

// The f32 call's family: a widened call is measured as an f32 one is.
int32_t F32Family(int32_t family) { return family == kOneDnn ? kMeasured : family; }

int32_t DotBf16(void* runtime, int32_t family, TFJIT_DOT_PARAMS(bfloat16)) {
  if (runtime != nullptr && family == kOneDnn) {
    return Dot<bfloat16>(runtime, family, TFJIT_DOT_ARGS, nullptr);
  }
  const int64_t lhs_size = lhs_stride != 0 ? batch * lhs_stride : m * k;
  const int64_t rhs_size = rhs_stride != 0 ? batch * rhs_stride : k * n;
  return ViaF32(runtime, out, batch * m * n, lhs, lhs_size, rhs, rhs_size,
                [&](float* o, const float* a, const float* b) {
                  return Dot<float>(runtime, F32Family(family), o, a, b, batch, lhs_stride,
                                    rhs_stride, m, n, k, transpose_lhs, transpose_rhs,
                                    &TfjitLinalg::dot_f32);
                });
}

// `bias` (null: none) and `activation` as Convolution's.
int32_t Conv2DBf16(void* runtime, int32_t family, TFJIT_CONV2D_PARAMS(bfloat16),
                   const bfloat16* bias, int32_t activation) {
  if (runtime != nullptr && family == kOneDnn) {
    return Convolution<bfloat16>(runtime, family, TFJIT_CONV2D_ARGS, bias, activation, nullptr);
  }
  const int64_t channels = bias == nullptr ? 0 : out_depth;
  const Floats wide_bias = AlignedFloats(channels);   // (TF's kernels check the alignment)
  for (int64_t c = 0; c < channels; ++c) wide_bias[c] = static_cast<float>(bias[c]);
  return ViaF32(runtime, out, batch * out_rows * out_cols * out_depth, input,
                batch * in_rows * in_cols * in_depth, filter,
                filter_rows * filter_cols * in_depth * out_depth,
                [&](float* o, const float* x, const float* w) {
                  return Convolution<float>(
                      runtime, F32Family(family), o, x, w, batch, in_rows, in_cols, in_depth,
                      filter_rows, filter_cols, out_depth, out_rows, out_cols, row_stride,
                      col_stride, row_dilation, col_dilation, pad_top, pad_bottom, pad_left,
                      pad_right, wide_bias.get(), activation,
                      &TfjitLinalg::conv2d_f32);
                });
}

template <bool kOfInput>
int32_t BackpropBf16(void* runtime, int32_t family, TFJIT_BACKPROP_PARAMS(bfloat16)) {
  const char* op = kOfInput ? "Conv2DBackpropInput" : "Conv2DBackpropFilter";
  if (runtime != nullptr && family == kOneDnn) {
    return Backprop<bfloat16>(op, kOfInput, false, runtime, family, TFJIT_BACKPROP_ARGS, nullptr);
  }
  const int64_t x_size = batch * in_rows * in_cols * in_depth;
  const int64_t w_size = filter_rows * filter_cols * in_depth * filter_depth;
  return ViaF32(runtime, out, kOfInput ? x_size : w_size, a, kOfInput ? w_size : x_size, grad,
                batch * out_rows * out_cols * filter_depth,
                [&](float* o, const float* wa, const float* g) {
                  return Backprop<float>(
                      op, kOfInput, false, runtime, F32Family(family), o, wa, g, batch, in_rows,
                      in_cols, in_depth, filter_rows, filter_cols, filter_depth, out_rows,
                      out_cols, row_stride, col_stride, pad_top, pad_bottom, pad_left, pad_right,
                      kOfInput ? &TfjitLinalg::conv2d_backprop_input_f32
                               : &TfjitLinalg::conv2d_backprop_filter_f32);
                });
}

// a: x (forward, filter gradient) or the filter (input gradient); b: the filter (forward)
// or the output's gradient.
template <Conv3DKind kKind>
int32_t Conv3DBf16(void* runtime, int32_t family, TFJIT_CONV3D_PARAMS(bfloat16)) {
  if (runtime != nullptr && family == kOneDnn) {
    return Conv3D<bfloat16>(kKind, runtime, family, TFJIT_CONV3D_ARGS, nullptr);
  }
  const int64_t x_size = batch * in_planes * in_rows * in_cols * in_depth;
  const int64_t w_size = filter_planes * filter_rows * filter_cols * in_depth * out_depth;
  const int64_t y_size = batch * out_planes * out_rows * out_cols * out_depth;
  const int64_t out_size = kKind == kForward ? y_size : kKind == kInputGradient ? x_size : w_size;
  constexpr HostFn<TfjitConv3DFn<float>> kHost =
      kKind == kForward ? &TfjitLinalg::conv3d_f32
      : kKind == kInputGradient ? &TfjitLinalg::conv3d_backprop_input_f32
                                : &TfjitLinalg::conv3d_backprop_filter_f32;
  return ViaF32(runtime, out, out_size, a, kKind == kInputGradient ? w_size : x_size, b,
                kKind == kForward ? w_size : y_size,
                [&](float* o, const float* wa, const float* wb) {
                  return Conv3D<float>(kKind, runtime, F32Family(family), o, wa, wb,
                                       TFJIT_CONV3D_SIZE_ARGS, kHost);
                });
}

}  // namespace
}  // namespace tfjit
}  // namespace tensorflow

TFJIT_EXPORT int32_t tfjit_rt_dot_bf16(void* runtime, int32_t kernel,
                                       TFJIT_DOT_PARAMS(tensorflow::bfloat16)) {
  return tensorflow::tfjit::DotBf16(runtime, kernel, TFJIT_DOT_ARGS);
}

TFJIT_EXPORT int32_t tfjit_rt_conv2d_bf16(void* runtime, int32_t kernel,
                                          TFJIT_CONV2D_PARAMS(tensorflow::bfloat16)) {
  return tensorflow::tfjit::Conv2DBf16(runtime, kernel, TFJIT_CONV2D_ARGS, nullptr, 0);
}

TFJIT_EXPORT int32_t tfjit_rt_conv2d_bias_bf16(void* runtime, int32_t kernel,
                                               TFJIT_CONV2D_BIAS_PARAMS(tensorflow::bfloat16)) {
  return tensorflow::tfjit::Conv2DBf16(runtime, kernel, TFJIT_CONV2D_ARGS, bias, activation);
}

TFJIT_EXPORT int32_t tfjit_rt_conv2d_backprop_input_bf16(
    void* runtime, int32_t kernel, TFJIT_BACKPROP_PARAMS(tensorflow::bfloat16)) {
  return tensorflow::tfjit::BackpropBf16<true>(runtime, kernel, TFJIT_BACKPROP_ARGS);
}

TFJIT_EXPORT int32_t tfjit_rt_conv2d_backprop_filter_bf16(
    void* runtime, int32_t kernel, TFJIT_BACKPROP_PARAMS(tensorflow::bfloat16)) {
  return tensorflow::tfjit::BackpropBf16<false>(runtime, kernel, TFJIT_BACKPROP_ARGS);
}

#define TFJIT_CONV3D_BF16(name, kind)                                                           \
  TFJIT_EXPORT int32_t tfjit_rt_##name##_bf16(void* runtime, int32_t kernel,                   \
                                              TFJIT_CONV3D_PARAMS(tensorflow::bfloat16)) {     \
    return tensorflow::tfjit::Conv3DBf16<tensorflow::tfjit::kind>(runtime, kernel,             \
                                                                  TFJIT_CONV3D_ARGS);          \
  }
TFJIT_CONV3D_BF16(conv3d, kForward)
TFJIT_CONV3D_BF16(conv3d_backprop_input, kInputGradient)
TFJIT_CONV3D_BF16(conv3d_backprop_filter, kFilterGradient)
