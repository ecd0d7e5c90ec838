// tfjit's runtime library: running one library call's TF kernel in parts side by side,
// one thread each (the kSplit family of a measured call, kernel_choice.cc).
//
// Why: TF's default kernels do not always use a second core. On 2 cores (Intel
// Sapphire Rapids, 2026-12-06) a chain of 12 ResNet stage-3 bottleneck 1x1
// convolutions at batch 4 ([144, 1024] x [1024, 256] and back) took 20.0 ms under
// tfjit with two intra-op threads and 19.0 ms with one (TF graph mode gained nothing
// either: 25.1 ms both; XLA 16.9 and 23.5). Run as two halves of their positions side
// by side, each on one thread, the chain took 10.3 ms. Whether that wins depends on the
// shapes and the CPU, so it is one more kernel a measured call times (kernel_choice.cc),
// not a rule.
//
// A call divides where its result's rows are independent (RowParts, tf_kernels.h):
// a convolution's images, a 1x1 stride-1 unpadded convolution's positions, a matrix
// product's rows, a gradient of the input by images. Each part is TF's kernel on its
// rows of the divided operands and of the result, the other operands whole; the parts
// start 64-byte aligned in all of them (TensorFlow CHECKs a Tensor's alignment), so a call
// that cannot be cut so runs whole.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "runtime.h"
#include "tf_kernels.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tensorflow {
namespace tfjit {
namespace {

// Rows per aligned unit of `parts` (a part is a whole number of units), or 0 when the
// call has fewer than two units.
int64_t PartGrain(const RowParts& parts, absl::Span<const Tensor> inputs, const Tensor& out) {
  auto grain_of = [&](const Tensor& t) {
    return 64 / std::gcd<int64_t>(64, t.TotalBytes() / parts.rows);
  };
  int64_t grain = grain_of(out);
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i) {
    if (parts.Divides(i)) grain = std::lcm(grain, grain_of(inputs[i]));
  }
  return parts.rows / grain >= 2 ? grain : 0;
}

// One call divided into `count` parts, each run by one thread (RunSplit's blocks).
struct PartsJob {
  OpKernelContext* ctx;
  OpKernel* kernel;
  absl::Span<Tensor> inputs;
  const Tensor* out;
  const RowParts* parts;
  int64_t grain, count;
  std::vector<absl::Status> status;
};

// Runs parts [begin, end) of the PartsJob at `bufs` (RunSplit's kernel signature),
// with TF's library code (Eigen's device, Shard) on this thread alone.
void RunParts(void** bufs, int64_t begin, int64_t end) {
  auto* job = reinterpret_cast<PartsJob*>(bufs);
  const RowParts& parts = *job->parts;
  ScopedPerThreadMaxParallelism one_thread(1);
  const int64_t units = parts.rows / job->grain;
  for (int64_t p = begin; p < end; ++p) {
    const int64_t first = job->grain * (units * p / job->count);
    const int64_t last =
        p + 1 == job->count ? parts.rows : job->grain * (units * (p + 1) / job->count);
    // Rows [first, last) of a tensor divided by rows, as a part of shape(last - first).
    auto part_of = [&](const Tensor& whole, int operand) {
      const int64_t row_bytes = whole.TotalBytes() / parts.rows;
      return Borrow(whole.dtype(), parts.shape(last - first, operand),
                    whole.tensor_data().data() + first * row_bytes);
    };
    absl::InlinedVector<Tensor, 3> inputs(job->inputs.begin(), job->inputs.end());
    for (int i = 0; i < static_cast<int>(inputs.size()); ++i) {
      if (parts.Divides(i)) inputs[i] = part_of(job->inputs[i], i);
    }
    const Tensor out = part_of(*job->out, RowParts::kResult);
    if (parts.sizes >= 0) inputs[parts.sizes] = Sizes(out.shape());
    job->status[p] = Compute(job->ctx, job->kernel, absl::MakeSpan(inputs), {out});
  }
}

}  // namespace

const DeviceBase::CpuWorkerThreads* SplitWorkers(const RuntimeContext* runtime,
                                                 const RowParts* parts,
                                                 absl::Span<Tensor> inputs, const Tensor& out) {
  if (parts == nullptr || parts->rows < 2 || runtime->ctx == nullptr) return nullptr;
  const DeviceBase::CpuWorkerThreads* workers =
      runtime->ctx->device()->tensorflow_cpu_worker_threads();
  if (workers == nullptr || workers->num_threads < 2 || GetPerThreadMaxParallelism() < 2 ||
      PartGrain(*parts, inputs, out) == 0) {
    return nullptr;
  }
  return workers;
}

absl::Status ComputeInParts(OpKernelContext* ctx, OpKernel* kernel, absl::Span<Tensor> inputs,
                            const Tensor& out, const RowParts& parts,
                            const DeviceBase::CpuWorkerThreads* workers) {
  const int64_t grain = PartGrain(parts, inputs, out);
  const int64_t count = std::min<int64_t>(parts.rows / grain, workers->num_threads);
  PartsJob job{ctx, kernel, inputs, &out, &parts, grain, count, std::vector<absl::Status>(count)};
  // A cost per part that makes RunSplit split rather than run inline, one part a block.
  constexpr int64_t kPartCost = int64_t{1} << 40;
  RunSplit(workers, RunParts, reinterpret_cast<void**>(&job), count, kPartCost);
  for (const absl::Status& status : job.status) TF_RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

}  // namespace tfjit
}  // namespace tensorflow
