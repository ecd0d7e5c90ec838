// What tf_kernels.cc shares with the other files of the runtime library that run
// TF's kernels (tf_solvers.cc): borrowing tfjit's buffers as Tensors, and running
// an op's default CPU kernel under the launch's context.
#ifndef TFJIT_RUNTIME_TF_KERNELS_H_
#define TFJIT_RUNTIME_TF_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "linalg.h"
#include "tensorflow/core/framework/node_def.pb.h"
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

// Runs the default CPU kernel of `spec` on `inputs` with tfjit's `outs` as its
// outputs, under the launch's context `runtime` (a RuntimeContext*, runtime.h):
// 0, or 1 with TF's status in its error.
int32_t RunDefault(void* runtime, const KernelSpec& spec, absl::Span<Tensor> inputs,
                   absl::Span<const Tensor> outs);

// The host library's table (linalg.h), or null before the host runner hands it over.
const TfjitLinalg* HostLinalg();

}  // namespace tfjit
}  // namespace tensorflow

#endif  // TFJIT_RUNTIME_TF_KERNELS_H_
