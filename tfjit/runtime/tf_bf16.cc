// The runtime library's bfloat16 product (called as tf_kernels.cc's entry points are,
// by codegen/library.py; passes/dots.py Bf16Products makes the calls):
//   tfjit_rt_dot_bf16(runtime, kernel, TFJIT_DOT_PARAMS(bf16))
// Where TF runs oneDNN (`kernel` kOneDnn) TF's bf16 MatMul/BatchMatMulV2 on oneDNN's
// kernel, what graph mode runs (AVX512-BF16 or AMX where the CPU has them). Elsewhere
// (any other family, or the host runner) the operands are widened to f32 (exactly),
// the f32 product runs as tfjit_rt_dot_f32 runs it, and the result is rounded to bf16
// once: the arithmetic of TF's bf16 kernels (f32 sums) and of tfjit's converts around an
// f32 dot, which this replaces. The widening and rounding loops are split over the
// launch's intra-op pool.

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

int32_t DotBf16(void* runtime, int32_t family, TFJIT_DOT_PARAMS(bfloat16)) {
  if (runtime != nullptr && family == kOneDnn) return OneDnnDotBf16(runtime, TFJIT_DOT_ARGS);
  const int64_t lhs_size = lhs_stride != 0 ? batch * lhs_stride : m * k;
  const int64_t rhs_size = rhs_stride != 0 ? batch * rhs_stride : k * n;
  const Floats a = AlignedFloats(lhs_size), b = AlignedFloats(rhs_size), c = AlignedFloats(batch * m * n);
  Convert widen_lhs{reinterpret_cast<const uint16_t*>(lhs), nullptr, a.get(), nullptr};
  Convert widen_rhs{reinterpret_cast<const uint16_t*>(rhs), nullptr, b.get(), nullptr};
  Split(runtime, Widen, &widen_lhs, lhs_size);
  Split(runtime, Widen, &widen_rhs, rhs_size);
  const int32_t rc = DotF32(runtime, family == kOneDnn ? kMeasured : family, c.get(), a.get(),
                            b.get(), batch, lhs_stride, rhs_stride, m, n, k, transpose_lhs,
                            transpose_rhs);
  if (rc != 0) return rc;
  Convert round{nullptr, c.get(), nullptr, reinterpret_cast<uint16_t*>(out)};
  Split(runtime, Round, &round, batch * m * n);
  return 0;
}

}  // namespace
}  // namespace tfjit
}  // namespace tensorflow

TFJIT_EXPORT int32_t tfjit_rt_dot_bf16(void* runtime, int32_t kernel,
                                       TFJIT_DOT_PARAMS(tensorflow::bfloat16)) {
  return tensorflow::tfjit::DotBf16(runtime, kernel, TFJIT_DOT_ARGS);
}
