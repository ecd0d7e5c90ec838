// What tf_kernels.cc shares with the other files of the runtime library that run
// TF's kernels (tf_solvers.cc, tf_fft.cc, kernel_choice.cc): borrowing tfjit's
// buffers as Tensors, running an op's default or oneDNN CPU kernel under the
// launch's context, and choosing between the two by timing them.
#ifndef TFJIT_RUNTIME_TF_KERNELS_H_
#define TFJIT_RUNTIME_TF_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "linalg.h"
#include "runtime.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace tensorflow {
namespace tfjit {

// A kernel to create: TF op, dtype, inputs, and its other attributes (`attrs`
// adds them to a node, and must outlive the spec; `attrs_key` says the same
// as a string).
struct KernelSpec {
  const char* op;
  DataType dtype;
  int num_inputs;
  std::string attrs_key;
  absl::FunctionRef<void(NodeDef*)> attrs;
};

// A Tensor over tfjit's memory `data` (TensorFlow never frees it).
Tensor Borrow(DataType dtype, const TensorShape& shape, const void* data);

// An int32 shape operand stating `shape` (a gradient's input_sizes or filter_sizes).
Tensor Sizes(const TensorShape& shape);

// Runs the default CPU kernel of `spec` on `inputs` with tfjit's `outs` as its
// outputs, under the launch's context `runtime` (a RuntimeContext*, runtime.h):
// 0, or 1 with TF's status in its error.
int32_t RunDefault(void* runtime, const KernelSpec& spec, absl::Span<Tensor> inputs,
                   absl::Span<const Tensor> outs);

// Which of TF's CPU kernels a library call runs (its `kernel` argument).
enum Family : int32_t {
  kDefault = 0,   // the op's default kernel: what TF graph mode runs with oneDNN off
  kOneDnn = 1,    // its oneDNN kernel (TF_ENABLE_ONEDNN_OPTS=1 rewrites to it), f32 only
  kMeasured = 2,  // whichever ran fastest on this call's shapes (kernel_choice.cc)
  // Never a call's argument, only a measured choice: the default kernel run in parts
  // side by side, one thread each (kernel_parts.cc ComputeInParts), for calls that
  // divide into independent rows (RowParts).
  kSplit = 3,
  // kMeasured without oneDNN's kernel among the candidates: a fused ReLU where TF's
  // graph mode does not run oneDNN (its post-op's max turns NaN into 0; TF's Relu and
  // Eigen's fused kernel keep NaN).
  kMeasuredWithoutOneDnn = 4,
};
// The families a measured call chooses among, indexed by Family (kMeasured's slot
// stays unused).
constexpr int kFamilies = 4;

// A call whose result divides into independent rows, each computed from the same rows
// of the inputs in `divided` (a mask of input indices) and the other inputs whole: a
// convolution's images, a 1x1 convolution's positions, a matrix product's rows, a
// batched product's matrices. `rows` of them; `shape(r, operand)` is the shape of a
// part of r rows of input `operand` (of the result where `operand` is -1); `sizes`,
// when not -1, is an input that states the result's shape (a gradient's input_sizes).
struct RowParts {
  static constexpr int kResult = -1;
  int64_t rows;
  absl::FunctionRef<TensorShape(int64_t rows, int operand)> shape;
  uint32_t divided = 1;
  int sizes = -1;

  bool Divides(int operand) const { return (divided >> operand) & 1; }
};

// Runs `kernel` on `inputs` (held here too, so no kernel may forward one as its
// output) with tfjit's `outs` as its outputs, under the launch's context `launch`.
absl::Status Compute(OpKernelContext* launch, OpKernel* kernel, absl::Span<Tensor> inputs,
                     absl::Span<const Tensor> outs);

// The intra-op pool a call of `parts` (null: none) would run its parts on, or null
// where it runs whole: fewer than two parts that start 64-byte aligned in the divided
// input and `out`, no pool of two threads, or a thread that must run its kernels alone
// (a task of a concurrent group, parallel.cc RunGroup). kernel_parts.cc.
const DeviceBase::CpuWorkerThreads* SplitWorkers(const RuntimeContext* runtime,
                                                 const RowParts* parts,
                                                 absl::Span<Tensor> inputs, const Tensor& out);

// Runs `kernel` in parts side by side on the calling thread and `workers`' pool (what
// SplitWorkers gave): as many parts as the pool has threads, at most one per aligned
// unit of rows; returns the first failing part's status. kernel_parts.cc.
absl::Status ComputeInParts(OpKernelContext* ctx, OpKernel* kernel, absl::Span<Tensor> inputs,
                            const Tensor& out, const RowParts& parts,
                            const DeviceBase::CpuWorkerThreads* workers);

// A kMeasured call's part in measuring its kernels (kernel_choice.cc).
struct Measurement {
  std::string key;      // the call's op, attributes and shapes
  bool timed = false;   // whether this run's time counts
};

// The family a kMeasured call runs (kernel_choice.cc): while its op, attributes and
// shapes are being measured, each candidate in turn (default, oneDNN where
// `with_onednn`, and kSplit where `can_split`), with `*m` saying how to report the run
// to RecordMeasurement; the fastest one after.
int32_t MeasuredFamily(const KernelSpec& spec, absl::Span<Tensor> inputs, bool can_split,
                       bool with_onednn, Measurement* m);

// Reports a run of `family` that MeasuredFamily handed out: whether it succeeded and
// how long it took.
void RecordMeasurement(const Measurement& m, int32_t family, bool ok, double micros);

// Runs the kernel of `family` for `spec` on `inputs` into `out`, under the launch's
// context: 0, or 1 with the status in runtime->error. A oneDNN kernel that fails
// (oneDNN refuses some paddings the default kernels take), or a split run that fails,
// is retried with the default one. A kMeasured call runs the family MeasuredFamily
// hands out and reports how that run went; `parts`, where given, says how the call
// divides for kSplit.
int32_t Run(RuntimeContext* runtime, int32_t family, const KernelSpec& spec,
            absl::Span<Tensor> inputs, const Tensor& out, const RowParts* parts = nullptr);

// The host library's table (linalg.h), or null before the host runner hands it over.
const TfjitLinalg* HostLinalg();

// The host library's function `fn` of the table (a member of TfjitLinalg).
template <typename Fn>
using HostFn = Fn TfjitLinalg::*;

// Runs a call without a launch (the host runner) on the host library; 1, a failed
// call, when no host library was handed over (runtime/host.py always loads it first).
template <typename Fn, typename... Args>
int32_t RunOnHost(HostFn<Fn> fn, Args... args) {
  const TfjitLinalg* table = HostLinalg();
  if (table == nullptr) return 1;
  (table->*fn)(args...);
  return 0;
}

template <typename T>
void Zero(T* out, int64_t n) {
  std::fill(out, out + n, T(0));
}

// The library calls, as their tfjit_rt_* entry points run them (`runtime` null: on
// the host library's `eigen`). Instantiated for float, double and bfloat16 (whose
// calls tf_bf16.cc makes with kOneDnn only: there is no host bf16 function).
// tf_kernels.cc: the product; tf_conv2d.cc: a convolution, or with `bias` (not null)
// activation(convolution + bias) in one call, and the four gradients (`op` takes
// (input_sizes, filter, grad) when `of_input`, else (input, filter_sizes, grad);
// `depthwise` says the filter's last dim is a multiplier).
template <typename T>
int32_t Dot(void* runtime, int32_t family, TFJIT_DOT_PARAMS(T), HostFn<TfjitDotFn<T>> eigen);
template <typename T>
int32_t Convolution(void* runtime, int32_t family, TFJIT_CONV2D_PARAMS(T), const T* bias,
                    int32_t activation, HostFn<TfjitConv2DFn<T>> eigen);
template <typename T>
int32_t Backprop(const char* op, bool of_input, bool depthwise, void* runtime, int32_t family,
                 TFJIT_BACKPROP_PARAMS(T), HostFn<TfjitBackpropFn<T>> eigen);
// tf_conv3d.cc: the 3-D convolution (kForward, with `bias` where not null: float and
// double only) and its two gradients.
enum Conv3DKind { kForward, kInputGradient, kFilterGradient };
template <typename T>
int32_t Conv3D(Conv3DKind kind, void* runtime, int32_t family, TFJIT_CONV3D_PARAMS(T),
               HostFn<TfjitConv3DFn<T>> host, const T* bias = nullptr, int32_t activation = 0);

// TF's fused_ops for a fused convolution's activation (TfjitActivation).
std::vector<std::string> FusedOps(int32_t activation);

// TF's Padding attr for explicit amounts (`pads`: low and high per spatial dim) of a
// convolution over `dims` spatial dims: VALID or SAME where those mean the same
// padding (TF's kernels take their fast paths only for them), else EXPLICIT.
const char* PaddingKind(int dims, const int64_t* in, const int64_t* window, const int64_t* stride,
                        const int64_t* pads);


}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_TF_KERNELS_H_
