// tfjit_rt_parallel_for: shards one kernel step over the launch's thread pool.
//
// The drivers that tfjit generates for control flow (codegen/control.py) run a
// loop body's kernels themselves, inside one step of the launch; for a step
// with enough work (rows * cost_per_row >= the launch op's kInlineCost, decided
// when the driver is generated) they call this instead of the kernel, so a
// large loop body is sharded over TF's intra-op pool exactly as the launch op
// shards top-level steps (runtime/launch_op.cc RunStep).
//
//   runtime: bufs[device_slot], the launch's tfjit::RuntimeContext (runtime.h),
//            whose OpKernelContext has the intra-op pool (null: run inline)
//   fn:     the kernel, TfjitKernelFn; called on disjoint [begin, end) of [0, rows)

#define EIGEN_USE_THREADS

#include <cstdint>

#include "runtime.h"
#include "unsupported/Eigen/CXX11/Tensor"

extern "C" {
typedef void (*TfjitKernelFn)(void** bufs, int64_t row_begin, int64_t row_end);

__attribute__((visibility("default"))) void tfjit_rt_parallel_for(void* runtime, TfjitKernelFn fn,
                                                                  void** bufs, int64_t rows,
                                                                  int64_t cost_per_row) {
  if (rows <= 0) return;
  auto* context = static_cast<tensorflow::tfjit::RuntimeContext*>(runtime);
  if (context == nullptr || context->ctx == nullptr || rows == 1) {
    fn(bufs, 0, rows);
    return;
  }
  const Eigen::ThreadPoolDevice* pool = &context->ctx->eigen_cpu_device();
  const Eigen::TensorOpCost cost(0, 0, static_cast<double>(cost_per_row > 0 ? cost_per_row : 1));
  pool->parallelFor(rows, cost, [fn, bufs](Eigen::Index begin, Eigen::Index end) {
    fn(bufs, static_cast<int64_t>(begin), static_cast<int64_t>(end));
  });
}
}
