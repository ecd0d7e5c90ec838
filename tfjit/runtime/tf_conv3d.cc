// The runtime library's 3-D convolutions (called as tf_kernels.cc's entry points are,
// by codegen/library.py), undilated, with the arguments of linalg.h's
// TFJIT_CONV3D_PARAMS:
//   tfjit_rt_conv3d_<t>(runtime, kernel, ...)                 TF's Conv3D
//   tfjit_rt_conv3d_backprop_input_<t>(runtime, kernel, ...)  TF's Conv3DBackpropInputV2
//   tfjit_rt_conv3d_backprop_filter_<t>(runtime, kernel, ...) TF's Conv3DBackpropFilterV2
//   tfjit_rt_conv3d_bias_<t>(runtime, kernel, ..., bias, activation)
//     activation(Conv3D + bias[channel]): TF's _FusedConv3D, whose only kernel is
//     oneDNN's (what graph mode's remapper makes of Conv3D + BiasAdd + Relu where TF
//     runs oneDNN; its ReLU turns NaN into 0, as graph mode's does there), for the
//     kOneDnn family; for any other, Conv3D and then the bias and activation in a loop
//     split over the intra-op pool (TfjitBiasActivation: NaN kept, as TF's Relu).
// Under TfjitLaunch each runs TF's own CPU kernel (Eigen's cuboid convolution) or
// oneDNN's (_MklNativeConv3D, ...), the kernels graph mode runs, chosen as the 2-D
// convolutions' are (`kernel`: a Family). TF's 3-D ops take SAME or VALID padding only
// (they have no EXPLICIT), so a call whose padding is neither fails with a message;
// lower/conv3d.py calls them only for TF ops, whose padding is one of the two.
// Without a launch (the host runner) linalg.cc's code runs: the depth taps gathered
// and one 2-D convolution, on the calling thread.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "linalg.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "runtime.h"
#include "tf_kernels.h"

namespace tensorflow {
namespace tfjit {
namespace {

constexpr const char* kConv3DOps[3] = {"Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2"};

// out[p, :] = activation(out[p, :] + bias) for rows [begin, end) of a BiasJob's output.
template <typename T>
struct BiasJob {
  T* out;
  const T* bias;
  int64_t depth;
  int32_t activation;
};

template <typename T>
void BiasRows(void** job, int64_t begin, int64_t end) {
  const auto* j = reinterpret_cast<const BiasJob<T>*>(job);
  TfjitBiasActivation(j->out + begin * j->depth, j->bias, end - begin, j->depth, j->activation);
}

}  // namespace

// `bias`, where not null: activation(convolution + bias) (kForward only).
template <typename T>
int32_t Conv3D(Conv3DKind kind, void* runtime, int32_t family, TFJIT_CONV3D_PARAMS(T),
               HostFn<TfjitConv3DFn<T>> host, const T* bias, int32_t activation) {
  const int64_t positions = batch * out_planes * out_rows * out_cols;
  if constexpr (std::is_same_v<T, bfloat16>) {
    bias = nullptr;     // (tf_bf16.cc makes no fused bf16 call)
  } else if (bias != nullptr && (runtime == nullptr || family != kOneDnn)) {
    const int32_t rc = Conv3D<T>(kind, runtime, family, TFJIT_CONV3D_ARGS, host);
    if (rc != 0 || positions * out_depth == 0) return rc;
    BiasJob<T> job{out, bias, out_depth, activation};
    const DeviceBase::CpuWorkerThreads* workers =
        runtime == nullptr ? nullptr
                           : static_cast<RuntimeContext*>(runtime)->ctx->device()->tensorflow_cpu_worker_threads();
    if (workers == nullptr) {
      BiasRows<T>(reinterpret_cast<void**>(&job), 0, positions);
    } else {
      RunSplit(workers, BiasRows<T>, reinterpret_cast<void**>(&job), positions, out_depth);
    }
    return 0;
  }
  const TensorShape x_shape({batch, in_planes, in_rows, in_cols, in_depth});
  const TensorShape w_shape({filter_planes, filter_rows, filter_cols, in_depth, out_depth});
  const TensorShape y_shape({batch, out_planes, out_rows, out_cols, out_depth});
  const TensorShape& result = kind == kForward ? y_shape : kind == kInputGradient ? x_shape : w_shape;
  if (x_shape.num_elements() == 0 || w_shape.num_elements() == 0 || y_shape.num_elements() == 0) {
    std::fill(out, out + result.num_elements(), T(0));   // a sum over nothing
    if constexpr (!std::is_same_v<T, bfloat16>) {
      if (bias != nullptr) TfjitBiasActivation(out, bias, positions, out_depth, activation);
    }
    return 0;
  }
  if (runtime == nullptr) {
    const TfjitLinalg* table = HostLinalg();
    if (table == nullptr) return 1;
    (table->*host)(TFJIT_CONV3D_ARGS);
    return 0;
  }
  auto* rt = static_cast<RuntimeContext*>(runtime);
  const int64_t in[3] = {in_planes, in_rows, in_cols};
  const int64_t window[3] = {filter_planes, filter_rows, filter_cols};
  const int64_t strides[3] = {plane_stride, row_stride, col_stride};
  const int64_t pads[6] = {pad_front, pad_back, pad_top, pad_bottom, pad_left, pad_right};
  const char* padding = PaddingKind(3, in, window, strides, pads);
  if (std::strcmp(padding, "EXPLICIT") == 0) {
    rt->error = absl::InvalidArgumentError(absl::StrCat(
        kConv3DOps[kind], " takes SAME or VALID padding only, not [", pads[0], ", ", pads[1],
        ", ", pads[2], ", ", pads[3], ", ", pads[4], ", ", pads[5], "]"));
    return 1;
  }
  auto attrs = [&](NodeDef* def) {
    AddNodeAttr("strides", std::vector<int64_t>{1, plane_stride, row_stride, col_stride, 1}, def);
    AddNodeAttr("padding", padding, def);
    AddNodeAttr("data_format", "NDHWC", def);
    if (bias == nullptr) return;
    AddNodeAttr("num_args", 1, def);
    AddNodeAttr("fused_ops", FusedOps(activation), def);
  };
  const DataType dtype = DataTypeToEnum<T>::v();
  const std::string key = absl::StrCat(plane_stride, ",", row_stride, ",", col_stride, "/", padding);
  const KernelSpec spec{bias != nullptr ? "_FusedConv3D" : kConv3DOps[kind], dtype,
                        kind == kForward && bias == nullptr ? 2 : 3,
                        bias != nullptr ? absl::StrCat(key, "/", activation) : key, attrs};
  Tensor inputs[3];
  if (kind == kForward) {
    inputs[0] = Borrow(dtype, x_shape, a);
    inputs[1] = Borrow(dtype, w_shape, b);
    if (bias != nullptr) inputs[2] = Borrow(dtype, TensorShape({out_depth}), bias);
  } else {
    const bool of_input = kind == kInputGradient;
    inputs[0] = of_input ? Sizes(x_shape) : Borrow(dtype, x_shape, a);
    inputs[1] = of_input ? Borrow(dtype, w_shape, a) : Sizes(w_shape);
    inputs[2] = Borrow(dtype, y_shape, b);
  }
  // Parts: the forward convolution and the input gradient divide into their images
  // (through the input, or the output gradient and the input_sizes it states); the
  // filter gradient sums over them and runs whole.
  auto part_shape = [&](int64_t r, int operand) {
    const bool of_x = kind == kForward ? operand != RowParts::kResult : operand == RowParts::kResult;
    TensorShape shape = of_x ? x_shape : y_shape;
    shape.set_dim(0, r);
    return shape;
  };
  const RowParts parts = kind == kForward
                             ? RowParts{batch, part_shape}
                             : RowParts{kind == kInputGradient ? batch : 0, part_shape,
                                        /*divided=*/1u << 2, /*sizes=*/0};
  return Run(rt, family, spec, absl::MakeSpan(inputs, spec.num_inputs), Borrow(dtype, result, out),
             &parts);
}

#define TFJIT_CONV3D_INSTANCE(T)                                                     \
  template int32_t Conv3D<T>(Conv3DKind, void*, int32_t, TFJIT_CONV3D_PARAMS(T),    \
                             HostFn<TfjitConv3DFn<T>>, const T*, int32_t);
TFJIT_CONV3D_INSTANCE(float)
TFJIT_CONV3D_INSTANCE(double)
TFJIT_CONV3D_INSTANCE(bfloat16)

}  // namespace tfjit
}  // namespace tensorflow

#define TFJIT_CONV3D(name, kind, suffix, T)                                                     \
  TFJIT_EXPORT int32_t tfjit_rt_##name##_##suffix(void* runtime, int32_t kernel,                 \
                                                  TFJIT_CONV3D_PARAMS(T)) {                      \
    return tensorflow::tfjit::Conv3D<T>(tensorflow::tfjit::kind, runtime, kernel,                \
                                        TFJIT_CONV3D_ARGS, &TfjitLinalg::name##_##suffix);      \
  }

#define TFJIT_CONV3D_DEFINE(suffix, T)                                                         \
  TFJIT_EXPORT int32_t tfjit_rt_conv3d_bias_##suffix(void* runtime, int32_t kernel,            \
                                                     TFJIT_CONV3D_BIAS_PARAMS(T)) {           \
    return tensorflow::tfjit::Conv3D<T>(tensorflow::tfjit::kForward, runtime, kernel,          \
                                        TFJIT_CONV3D_ARGS, &TfjitLinalg::conv3d_##suffix, bias, \
                                        activation);                                           \
  }                                                                                            \
  TFJIT_CONV3D(conv3d, kForward, suffix, T)                             \
  TFJIT_CONV3D(conv3d_backprop_input, kInputGradient, suffix, T)        \
  TFJIT_CONV3D(conv3d_backprop_filter, kFilterGradient, suffix, T)

TFJIT_CONV3D_DEFINE(f32, float)
TFJIT_CONV3D_DEFINE(f64, double)
