// What a running TfjitLaunch hands the runtime library (tf_kernels.cc) in
// bufs[device_slot]: the launch's OpKernelContext, through which TF's own CPU
// kernels get their device, allocator and intra-op thread pool, and the slot
// where the first failing kernel leaves its status. Included by launch_op.cc
// and tf_kernels.cc; the pointer is null in the host runner (runtime/host.py)
// and in AOT objects, where the library runs its own Eigen code (linalg.cc).
#ifndef TFJIT_RUNTIME_RUNTIME_H_
#define TFJIT_RUNTIME_RUNTIME_H_

#include <cstdint>

#include "abi.h"
#include "absl/status/status.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tensorflow {
namespace tfjit {

struct RuntimeContext {
  OpKernelContext* ctx = nullptr;
  // Set by a library call that returns nonzero (one call per launch: steps run one
  // at a time, and each task of a concurrent group has a context of its own); the
  // launch reports it.
  absl::Status error;
};

// Runs `fn` over rows [0, rows): on the calling thread when the step is small
// (rows * cost_per_row estimated cycles) or `workers` is null, else in blocks that
// the calling thread and `workers`' pool take from one counter (parallel.cc);
// returns when all have run.
void RunSplit(const DeviceBase::CpuWorkerThreads* workers, TfjitKernelFn fn, void** bufs,
              int64_t rows, int64_t cost_per_row);

// Runs the concurrent group that starts at `steps` (steps[0].group steps: abi.h) and
// returns when all of it has run: with the calling thread and `workers`' pool, each
// task on one thread, where the pool has no more threads than the group has tasks;
// else one step at a time, each split as RunSplit splits it. `bufs` is the launch's
// pointer array (`num_bufs` slots, status and runtime last). The first failing task
// in step order leaves its status in `status` and its library error in `runtime`.
void RunGroup(const DeviceBase::CpuWorkerThreads* workers, const TfjitStep* steps,
              void** bufs, int64_t num_bufs, TfjitStatus* status, RuntimeContext* runtime);

}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_RUNTIME_H_
