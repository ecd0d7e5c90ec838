// The runtime library's 2-D convolutions (called as tf_kernels.cc's entry points are,
// by codegen/library.py; the ABI is tf_kernels.cc's):
//   tfjit_rt_conv2d_<t>, tfjit_rt_conv2d_bias_<t>: TF's Conv2D, _FusedConv2D;
//   tfjit_rt_{conv2d,depthwise}_backprop_{input,filter}_<t>: TF's Conv2DBackpropInput/
//     Filter and DepthwiseConv2dNativeBackpropInput/Filter.
// Under TfjitLaunch TF's default or oneDNN kernel (chosen as every library call's);
// without a launch linalg.cc's Eigen code. The templates are instantiated for bf16 too:
// tf_bf16.cc runs them on oneDNN's bf16 kernels.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "linalg.h"
#include "runtime.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tf_kernels.h"

namespace tensorflow {
namespace tfjit {

std::vector<std::string> FusedOps(int32_t activation) {
  if (activation == kTfjitRelu) return {"BiasAdd", "Relu"};
  if (activation == kTfjitRelu6) return {"BiasAdd", "Relu6"};
  return {"BiasAdd"};
}

const char* PaddingKind(int dims, const int64_t* in, const int64_t* window, const int64_t* stride,
                        const int64_t* pads) {
  if (std::all_of(pads, pads + 2 * dims, [](int64_t p) { return p == 0; })) return "VALID";
  for (int d = 0; d < dims; ++d) {
    const int64_t out = (in[d] + stride[d] - 1) / stride[d];
    const int64_t total = std::max<int64_t>((out - 1) * stride[d] + window[d] - in[d], 0);
    if (pads[2 * d] != total / 2 || pads[2 * d + 1] != total - total / 2) return "EXPLICIT";
  }
  return "SAME";
}

namespace {

// The attributes the convolution ops share.
struct ConvAttrs {
  int64_t strides[2], dilations[2], pads[4];
  const char* padding;

  ConvAttrs(int64_t in_rows, int64_t in_cols, int64_t filter_rows, int64_t filter_cols,
            int64_t row_stride, int64_t col_stride, int64_t row_dilation, int64_t col_dilation,
            int64_t pad_top, int64_t pad_bottom, int64_t pad_left, int64_t pad_right)
      : strides{row_stride, col_stride}, dilations{row_dilation, col_dilation},
        pads{pad_top, pad_bottom, pad_left, pad_right} {
    const int64_t in[2] = {in_rows, in_cols};
    const int64_t window[2] = {(filter_rows - 1) * row_dilation + 1,
                               (filter_cols - 1) * col_dilation + 1};
    padding = PaddingKind(2, in, window, strides, pads);
  }

  bool explicit_padding() const { return std::strcmp(padding, "EXPLICIT") == 0; }

  std::string Key() const {
    std::string key = absl::StrCat(strides[0], ",", strides[1], "/", dilations[0], ",",
                                   dilations[1], "/", padding);
    if (explicit_padding()) {
      absl::StrAppend(&key, "/", pads[0], ",", pads[1], ",", pads[2], ",", pads[3]);
    }
    return key;
  }

  void Add(NodeDef* def) const {
    AddNodeAttr("strides", std::vector<int64_t>{1, strides[0], strides[1], 1}, def);
    AddNodeAttr("dilations", std::vector<int64_t>{1, dilations[0], dilations[1], 1}, def);
    AddNodeAttr("padding", padding, def);
    if (explicit_padding()) {
      AddNodeAttr("explicit_paddings",
                  std::vector<int64_t>{0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0}, def);
    }
    AddNodeAttr("data_format", "NHWC", def);
  }
};

}  // namespace

// A convolution, or with `bias` (not null) activation(convolution + bias) in one call:
// TF's _FusedConv2D kernel (or oneDNN's), which adds the bias and applies the activation
// to each block of the output while it is in cache, as TF's remapper fuses graph mode's
// Conv2D + BiasAdd + Relu; without a launch, the host library's convolution and then
// TfjitBiasActivation.
template <typename T>
int32_t Convolution(void* runtime, int32_t family, TFJIT_CONV2D_PARAMS(T), const T* bias,
                    int32_t activation, HostFn<TfjitConv2DFn<T>> eigen) {
  const int64_t positions = batch * out_rows * out_cols;
  if (in_rows == 0 || in_cols == 0 || in_depth == 0 || filter_rows == 0 || filter_cols == 0) {
    Zero(out, positions * out_depth);   // every window is all padding
    if (bias != nullptr) TfjitBiasActivation(out, bias, positions, out_depth, activation);
    return 0;
  }
  if (runtime == nullptr) {
    const int32_t rc = RunOnHost(eigen, TFJIT_CONV2D_ARGS);
    if (rc == 0 && bias != nullptr) TfjitBiasActivation(out, bias, positions, out_depth, activation);
    return rc;
  }
  auto* rt = static_cast<RuntimeContext*>(runtime);
  const DataType dtype = DataTypeToEnum<T>::v();
  const ConvAttrs attrs(in_rows, in_cols, filter_rows, filter_cols, row_stride, col_stride,
                        row_dilation, col_dilation, pad_top, pad_bottom, pad_left, pad_right);
  auto add_attrs = [&](NodeDef* def) {
    attrs.Add(def);
    if (bias == nullptr) return;
    AddNodeAttr("num_args", 1, def);
    AddNodeAttr("fused_ops", FusedOps(activation), def);
    const OpDef* op_def = nullptr;      // TF's op types its args; oneDNN's takes T for all
    if (OpRegistry::Global()->LookUpOpDef(def->op(), &op_def).ok() &&
        FindAttr("TArgs", *op_def) != nullptr) {
      AddNodeAttr("TArgs", DataTypeVector{dtype}, def);
    }
  };
  const KernelSpec spec{bias == nullptr ? "Conv2D" : "_FusedConv2D", dtype,
                        bias == nullptr ? 2 : 3,
                        bias == nullptr ? attrs.Key() : absl::StrCat(attrs.Key(), "/", activation),
                        add_attrs};
  Tensor inputs[3] = {
      Borrow(dtype, TensorShape({batch, in_rows, in_cols, in_depth}), input),
      Borrow(dtype, TensorShape({filter_rows, filter_cols, in_depth, out_depth}), filter),
      bias == nullptr ? Tensor() : Borrow(dtype, TensorShape({out_depth}), bias)};
  const Tensor result = Borrow(dtype, TensorShape({batch, out_rows, out_cols, out_depth}), out);
  // Parts: a 1x1 convolution of stride 1 without padding is a product of its positions
  // ([1, 1, positions, depth] parts: TF's kernel takes its matrix-product path for
  // them too); any other divides into its images.  The bias is every part's.
  const bool pointwise = filter_rows == 1 && filter_cols == 1 && row_stride == 1 &&
                         col_stride == 1 && std::strcmp(attrs.padding, "VALID") == 0;
  auto part_shape = [&](int64_t r, int operand) {
    const bool of_output = operand == RowParts::kResult;
    if (pointwise) return TensorShape({1, 1, r, of_output ? out_depth : in_depth});
    return of_output ? TensorShape({r, out_rows, out_cols, out_depth})
                     : TensorShape({r, in_rows, in_cols, in_depth});
  };
  const RowParts parts{pointwise ? positions : batch, part_shape};
  return Run(rt, family, spec, absl::MakeSpan(inputs, bias == nullptr ? 2 : 3), result, &parts);
}

// The four gradients: `op` takes (input_sizes, filter, grad) when `of_input`, else
// (input, filter_sizes, grad); `depthwise` says the filter's last dim is a multiplier.
template <typename T>
int32_t Backprop(const char* op, bool of_input, bool depthwise, void* runtime, int32_t family,
                 TFJIT_BACKPROP_PARAMS(T), HostFn<TfjitBackpropFn<T>> eigen) {
  const int64_t out_depth = depthwise ? in_depth * filter_depth : filter_depth;
  const int64_t out_size = of_input ? batch * in_rows * in_cols * in_depth
                                    : filter_rows * filter_cols * in_depth * filter_depth;
  const int64_t a_size = of_input ? filter_rows * filter_cols * in_depth * filter_depth
                                  : batch * in_rows * in_cols * in_depth;
  if (a_size == 0 || batch * out_rows * out_cols * out_depth == 0) {
    Zero(out, out_size);   // a sum over nothing
    return 0;
  }
  if (runtime == nullptr) return RunOnHost(eigen, TFJIT_BACKPROP_ARGS);
  auto* rt = static_cast<RuntimeContext*>(runtime);
  const DataType dtype = DataTypeToEnum<T>::v();
  const ConvAttrs attrs(in_rows, in_cols, filter_rows, filter_cols, row_stride, col_stride, 1, 1,
                        pad_top, pad_bottom, pad_left, pad_right);
  auto add_attrs = [&](NodeDef* def) { attrs.Add(def); };
  const KernelSpec spec{op, dtype, 3, attrs.Key(), add_attrs};
  const TensorShape x_shape({batch, in_rows, in_cols, in_depth});
  const TensorShape w_shape({filter_rows, filter_cols, in_depth, filter_depth});
  const Tensor g = Borrow(dtype, TensorShape({batch, out_rows, out_cols, out_depth}), grad);
  Tensor inputs[3] = {of_input ? Sizes(x_shape) : Borrow(dtype, x_shape, a),
                      of_input ? Borrow(dtype, w_shape, a) : Sizes(w_shape), g};
  const Tensor result = Borrow(dtype, of_input ? x_shape : w_shape, out);
  // The gradient of the input divides as the forward convolution does (by positions
  // where it is 1x1 and unpadded, else by images), through the gradient operand.
  const bool pointwise = of_input && !depthwise && filter_rows == 1 && filter_cols == 1 &&
                         row_stride == 1 && col_stride == 1 &&
                         std::strcmp(attrs.padding, "VALID") == 0;
  auto part_shape = [&](int64_t r, int operand) {
    const bool of_output = operand == RowParts::kResult;
    const int64_t depth = of_output ? in_depth : out_depth;
    return pointwise ? TensorShape({1, 1, r, depth})
           : of_output ? TensorShape({r, in_rows, in_cols, in_depth})
                       : TensorShape({r, out_rows, out_cols, out_depth});
  };
  const RowParts parts{!of_input ? 0 : pointwise ? batch * in_rows * in_cols : batch, part_shape,
                       /*divided=*/1u << 2, /*sizes=*/0};
  return Run(rt, family, spec, inputs, result, &parts);
}

#define TFJIT_CONV2D_INSTANCES(T)                                                            \
  template int32_t Convolution<T>(void*, int32_t, TFJIT_CONV2D_PARAMS(T), const T*, int32_t, \
                                  HostFn<TfjitConv2DFn<T>>);                                 \
  template int32_t Backprop<T>(const char*, bool, bool, void*, int32_t,                      \
                               TFJIT_BACKPROP_PARAMS(T), HostFn<TfjitBackpropFn<T>>);
TFJIT_CONV2D_INSTANCES(float)
TFJIT_CONV2D_INSTANCES(double)
TFJIT_CONV2D_INSTANCES(bfloat16)

}  // namespace tfjit
}  // namespace tensorflow

#define TFJIT_BACKPROP(name, op, of_input, depthwise, suffix, T)                                \
  TFJIT_EXPORT int32_t tfjit_rt_##name##_##suffix(void* runtime, int32_t kernel,                 \
                                                  TFJIT_BACKPROP_PARAMS(T)) {                    \
    return tensorflow::tfjit::Backprop<T>(op, of_input, depthwise, runtime, kernel,              \
                                          TFJIT_BACKPROP_ARGS, &TfjitLinalg::name##_##suffix);   \
  }

#define TFJIT_CONV2D_DEFINE(suffix, T)                                                           \
  TFJIT_EXPORT int32_t tfjit_rt_conv2d_##suffix(void* runtime, int32_t kernel,                   \
                                                TFJIT_CONV2D_PARAMS(T)) {                        \
    return tensorflow::tfjit::Convolution<T>(runtime, kernel, TFJIT_CONV2D_ARGS, nullptr, 0,    \
                                             &TfjitLinalg::conv2d_##suffix);                     \
  }                                                                                              \
  TFJIT_EXPORT int32_t tfjit_rt_conv2d_bias_##suffix(void* runtime, int32_t kernel,              \
                                                     TFJIT_CONV2D_BIAS_PARAMS(T)) {             \
    return tensorflow::tfjit::Convolution<T>(runtime, kernel, TFJIT_CONV2D_ARGS, bias,          \
                                             activation, &TfjitLinalg::conv2d_##suffix);         \
  }                                                                                              \
  TFJIT_BACKPROP(conv2d_backprop_input, "Conv2DBackpropInput", true, false, suffix, T)           \
  TFJIT_BACKPROP(conv2d_backprop_filter, "Conv2DBackpropFilter", false, false, suffix, T)        \
  TFJIT_BACKPROP(depthwise_backprop_input, "DepthwiseConv2dNativeBackpropInput", true, true,     \
                 suffix, T)                                                                      \
  TFJIT_BACKPROP(depthwise_backprop_filter, "DepthwiseConv2dNativeBackpropFilter", false, true,  \
                 suffix, T)

TFJIT_CONV2D_DEFINE(f32, float)
TFJIT_CONV2D_DEFINE(f64, double)
