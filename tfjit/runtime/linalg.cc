// The runtime library's own code for heavy ops: Eigen's matmul, spatial
// convolution and loops for the depthwise gradients here; HouseholderQR, the
// dense solvers (triangular, LU, Cholesky), the self-adjoint eigensolver and
// BDCSVD in linalg_decompositions.cc (a translation unit of its own, so the two
// -O3 Eigen compiles run side by side: each takes minutes on one core). All run
// on the calling thread.
// tf_kernels.cc runs these where there is no TensorFlow kernel to call: in the
// host runner (runtime/host.py), whose bufs[device_slot] is null. Under
// TfjitLaunch the same library calls run TensorFlow's own kernels.
//
// A shared library of its own (runtime/build.py builds it when a host run
// first needs it, for one of a fixed set of x86-64 levels chosen at run time),
// handed to the op library as one table of functions (tfjit_linalg_table).
//
// ABI: linalg.h (the arguments are those of the tfjit_rt_* entry points, less
// the runtime context). All tensors are dense, row-major, 64-byte aligned,
// never alias `out`, and have at least one element (tf_kernels.cc zeroes the
// result of a contraction over an empty operand itself).
//
// Float arithmetic is that of TF's Eigen kernels (f32 accumulation for f32);
// denormals follow the calling thread's MXCSR.

#include "linalg.h"

#include <algorithm>
#include <cstdint>

#include "linalg_decompositions.h"
#include "unsupported/Eigen/CXX11/Tensor"
#include "xla/tsl/framework/convolution/eigen_spatial_convolutions.h"

namespace {

using Index = Eigen::Index;
template <typename T, int N>
using ConstMap = Eigen::TensorMap<Eigen::Tensor<const T, N, Eigen::RowMajor, Index>, Eigen::Aligned>;
template <typename T, int N>
using Map = Eigen::TensorMap<Eigen::Tensor<T, N, Eigen::RowMajor, Index>, Eigen::Aligned>;
template <typename T, int N>
using Temp = Eigen::Tensor<T, N, Eigen::RowMajor, Index>;

template <typename Out, typename Expr>
void Assign(Out out, const Expr& expr) {
  out.device(Eigen::DefaultDevice()) = expr;
}

template <typename T>
void Dot(T* out, const T* lhs, const T* rhs, int64_t batch, int64_t lhs_batch_stride,
         int64_t rhs_batch_stride, int64_t m, int64_t n, int64_t k, int32_t transpose_lhs,
         int32_t transpose_rhs) {
  const Eigen::array<Eigen::IndexPair<Index>, 1> contract = {
      Eigen::IndexPair<Index>(transpose_lhs ? 0 : 1, transpose_rhs ? 1 : 0)};
  for (int64_t b = 0; b < batch; ++b) {
    ConstMap<T, 2> a(lhs + b * lhs_batch_stride, transpose_lhs ? k : m, transpose_lhs ? m : k);
    ConstMap<T, 2> c(rhs + b * rhs_batch_stride, transpose_rhs ? n : k, transpose_rhs ? k : n);
    Assign(Map<T, 2>(out + b * m * n, m, n), a.contract(c, contract));
  }
}

template <typename T>
void Conv2D(T* out, const T* input, const T* filter, int64_t batch, int64_t in_rows,
            int64_t in_cols, int64_t in_depth, int64_t filter_rows, int64_t filter_cols,
            int64_t out_depth, int64_t out_rows, int64_t out_cols, int64_t row_stride,
            int64_t col_stride, int64_t row_dilation, int64_t col_dilation, int64_t pad_top,
            int64_t pad_bottom, int64_t pad_left, int64_t pad_right) {
  Map<T, 4> o(out, batch, out_rows, out_cols, out_depth);
  ConstMap<T, 4> in(input, batch, in_rows, in_cols, in_depth);
  ConstMap<T, 4> f(filter, filter_rows, filter_cols, in_depth, out_depth);
  // Eigen reads NHWC as NWHC: rows and columns swap (as tensorflow/core/kernels/conv_2d.h).
  Assign(o, Eigen::SpatialConvolution(in, f, col_stride, row_stride, Eigen::PADDING_VALID,
                                      col_dilation, row_dilation, Eigen::NoOpOutputKernel(),
                                      pad_left, pad_right, pad_top, pad_bottom));
}

// dx = the stride-1 convolution of the gradient, with zeros between its elements
// (`inflate`), padded to give the input size, with the filter flipped in space and its
// depths swapped. Padding wider than the window crops the gradient instead.
template <typename T>
void Conv2DBackpropInput(T* out, const T* filter, const T* grad, int64_t batch, int64_t in_rows,
                         int64_t in_cols, int64_t in_depth, int64_t filter_rows,
                         int64_t filter_cols, int64_t out_depth, int64_t out_rows,
                         int64_t out_cols, int64_t row_stride, int64_t col_stride,
                         int64_t pad_top, int64_t pad_bottom, int64_t pad_left,
                         int64_t pad_right) {
  ConstMap<T, 4> g(grad, batch, out_rows, out_cols, out_depth);
  ConstMap<T, 4> f(filter, filter_rows, filter_cols, in_depth, out_depth);
  Temp<T, 4> flipped = f.reverse(Eigen::array<bool, 4>{true, true, false, false})
                           .shuffle(Eigen::array<Index, 4>{0, 1, 3, 2});
  const Index rows = (out_rows - 1) * row_stride + 1, cols = (out_cols - 1) * col_stride + 1;
  const Index low_r = filter_rows - 1 - pad_top, high_r = in_rows + pad_top - rows;
  const Index low_c = filter_cols - 1 - pad_left, high_c = in_cols + pad_left - cols;
  const Index crop_top = std::max<Index>(-low_r, 0), crop_bottom = std::max<Index>(-high_r, 0);
  const Index crop_left = std::max<Index>(-low_c, 0), crop_right = std::max<Index>(-high_c, 0);
  const Index kept_r = rows - crop_top - crop_bottom, kept_c = cols - crop_left - crop_right;
  Map<T, 4> dx(out, batch, in_rows, in_cols, in_depth);
  if (kept_r <= 0 || kept_c <= 0) {   // every gradient element lies in the padding
    dx.setZero();
    return;
  }
  Temp<T, 4> inflated = g.inflate(Eigen::array<Index, 4>{1, row_stride, col_stride, 1});
  Temp<T, 4> kept = inflated.slice(Eigen::array<Index, 4>{0, crop_top, crop_left, 0},
                                   Eigen::array<Index, 4>{batch, kept_r, kept_c, out_depth});
  Conv2D<T>(out, kept.data(), flipped.data(), batch, kept_r, kept_c, out_depth, filter_rows,
            filter_cols, in_depth, in_rows, in_cols, 1, 1, 1, 1, std::max<Index>(low_r, 0),
            std::max<Index>(high_r, 0), std::max<Index>(low_c, 0), std::max<Index>(high_c, 0));
}

// dw[i, j] = (the padded input's tap (i, j), strided) contracted with the gradient
// over batch, rows and columns: one contraction per filter tap.
template <typename T>
void Conv2DBackpropFilter(T* out, const T* input, const T* grad, int64_t batch, int64_t in_rows,
                          int64_t in_cols, int64_t in_depth, int64_t filter_rows,
                          int64_t filter_cols, int64_t out_depth, int64_t out_rows,
                          int64_t out_cols, int64_t row_stride, int64_t col_stride,
                          int64_t pad_top, int64_t pad_bottom, int64_t pad_left,
                          int64_t pad_right) {
  ConstMap<T, 4> x(input, batch, in_rows, in_cols, in_depth);
  ConstMap<T, 2> g(grad, batch * out_rows * out_cols, out_depth);
  Eigen::array<std::pair<Index, Index>, 4> pads = {
      std::make_pair(Index{0}, Index{0}), std::make_pair(Index(pad_top), Index(pad_bottom)),
      std::make_pair(Index(pad_left), Index(pad_right)), std::make_pair(Index{0}, Index{0})};
  Temp<T, 4> padded = x.pad(pads);
  const Eigen::array<Index, 4> extent = {batch, (out_rows - 1) * row_stride + 1,
                                         (out_cols - 1) * col_stride + 1, in_depth};
  const Eigen::array<Index, 4> strides = {1, row_stride, col_stride, 1};
  const Eigen::array<Index, 2> flat = {batch * out_rows * out_cols, in_depth};
  const Eigen::array<Eigen::IndexPair<Index>, 1> contract = {Eigen::IndexPair<Index>(0, 0)};
  for (Index i = 0; i < filter_rows; ++i) {
    for (Index j = 0; j < filter_cols; ++j) {
      auto tap = padded.slice(Eigen::array<Index, 4>{0, i, j, 0}, extent).stride(strides).reshape(flat);
      Map<T, 2> dw(out + (i * filter_cols + j) * in_depth * out_depth, in_depth, out_depth);
      Assign(dw, tap.contract(g, contract));
    }
  }
}

// Depthwise gradients as loops: each input channel c meets output channels
// c * multiplier + m only, so there is no contraction to hand to Eigen.
// ForEachTap calls visit(g, i, j, pixel) for every output pixel's gradient row g
// (out_depth values) and filter tap (i, j) that lands on input pixel `pixel` (its
// index in [batch * in_rows * in_cols]); taps in the padding are skipped.
template <typename T, typename Visit>
void ForEachTap(const T* grad, int64_t batch, int64_t in_rows, int64_t in_cols,
                int64_t filter_rows, int64_t filter_cols, int64_t out_depth, int64_t out_rows,
                int64_t out_cols, int64_t row_stride, int64_t col_stride, int64_t pad_top,
                int64_t pad_left, Visit visit) {
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t y = 0; y < out_rows; ++y) {
      for (int64_t x = 0; x < out_cols; ++x) {
        const T* g = grad + ((n * out_rows + y) * out_cols + x) * out_depth;
        for (int64_t i = 0; i < filter_rows; ++i) {
          const int64_t r = y * row_stride + i - pad_top;
          if (r < 0 || r >= in_rows) continue;
          for (int64_t j = 0; j < filter_cols; ++j) {
            const int64_t c = x * col_stride + j - pad_left;
            if (c < 0 || c >= in_cols) continue;
            visit(g, i, j, (n * in_rows + r) * in_cols + c);
          }
        }
      }
    }
  }
}

template <typename T>
void DepthwiseBackpropInput(T* out, const T* filter, const T* grad, int64_t batch, int64_t in_rows,
                            int64_t in_cols, int64_t in_depth, int64_t filter_rows,
                            int64_t filter_cols, int64_t multiplier, int64_t out_rows,
                            int64_t out_cols, int64_t row_stride, int64_t col_stride,
                            int64_t pad_top, int64_t /*pad_bottom*/, int64_t pad_left,
                            int64_t /*pad_right*/) {
  std::fill(out, out + batch * in_rows * in_cols * in_depth, T(0));
  const int64_t out_depth = in_depth * multiplier;
  ForEachTap(grad, batch, in_rows, in_cols, filter_rows, filter_cols, out_depth, out_rows, out_cols,
             row_stride, col_stride, pad_top, pad_left,
             [&](const T* g, int64_t i, int64_t j, int64_t pixel) {
               T* dx = out + pixel * in_depth;
               const T* f = filter + (i * filter_cols + j) * out_depth;
               for (int64_t d = 0; d < in_depth; ++d) {
                 T sum = 0;
                 for (int64_t m = 0; m < multiplier; ++m) sum += g[d * multiplier + m] * f[d * multiplier + m];
                 dx[d] += sum;
               }
             });
}

template <typename T>
void DepthwiseBackpropFilter(T* out, const T* input, const T* grad, int64_t batch, int64_t in_rows,
                             int64_t in_cols, int64_t in_depth, int64_t filter_rows,
                             int64_t filter_cols, int64_t multiplier, int64_t out_rows,
                             int64_t out_cols, int64_t row_stride, int64_t col_stride,
                             int64_t pad_top, int64_t /*pad_bottom*/, int64_t pad_left,
                             int64_t /*pad_right*/) {
  const int64_t out_depth = in_depth * multiplier;
  std::fill(out, out + filter_rows * filter_cols * out_depth, T(0));
  ForEachTap(grad, batch, in_rows, in_cols, filter_rows, filter_cols, out_depth, out_rows, out_cols,
             row_stride, col_stride, pad_top, pad_left,
             [&](const T* g, int64_t i, int64_t j, int64_t pixel) {
               const T* in = input + pixel * in_depth;
               T* df = out + (i * filter_cols + j) * out_depth;
               for (int64_t d = 0; d < in_depth; ++d) {
                 for (int64_t m = 0; m < multiplier; ++m) df[d * multiplier + m] += in[d] * g[d * multiplier + m];
               }
             });
}

// 3-D convolutions through the 2-D ones above (lower/conv3d.py's depth taps, here
// for the host runner and tfjit-aot): the kd depth taps of each output plane side by
// side along the channels, P [N * Do, H, W, kd * C] (zeros in the depth padding), and
// the filter read as [kh, kw, kd * C, O] make one 2-D convolution.
struct Conv3DShape {
  int64_t batch, planes, rows, cols, depth, kd, kh, kw, out_depth, out_planes, out_rows, out_cols,
      plane_stride, row_stride, col_stride, front, top, bottom, left, right;

  int64_t images() const { return batch * out_planes; }   // P's
  int64_t taps_depth() const { return kd * depth; }       // P's channels

  // fn(p, x, n): row n of P (kd * depth values) and of x (depth values) for every tap
  // of every output plane inside the input's depth, p and x offsets in elements.
  template <typename Fn>
  void ForEachTap(Fn fn) const {
    const int64_t plane = rows * cols;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t o = 0; o < out_planes; ++o) {
        for (int64_t t = 0; t < kd; ++t) {
          const int64_t d = o * plane_stride + t - front;
          if (d < 0 || d >= planes) continue;
          fn(((n * out_planes + o) * plane) * taps_depth() + t * depth,
             ((n * planes + d) * plane) * depth, plane);
        }
      }
    }
  }
};

#define TFJIT_CONV3D_SHAPE                                                                    \
  Conv3DShape {                                                                               \
    batch, in_planes, in_rows, in_cols, in_depth, filter_planes, filter_rows, filter_cols,    \
        out_depth, out_planes, out_rows, out_cols, plane_stride, row_stride, col_stride,      \
        pad_front, pad_top, pad_bottom, pad_left, pad_right                                   \
  }

template <typename T>
Temp<T, 1> DepthTaps(const T* x, const Conv3DShape& s) {
  Temp<T, 1> p(s.images() * s.rows * s.cols * s.taps_depth());
  p.setZero();
  s.ForEachTap([&](int64_t to, int64_t from, int64_t positions) {
    for (int64_t q = 0; q < positions; ++q) {
      std::copy_n(x + from + q * s.depth, s.depth, p.data() + to + q * s.taps_depth());
    }
  });
  return p;
}

// [kd, kh, kw, C, O] as [kh, kw, kd * C, O], or back (`to_3d`)
template <typename T>
void Filter2D(T* out, const T* w, const Conv3DShape& s, bool to_3d) {
  const int64_t block = s.depth * s.out_depth;
  for (int64_t t = 0; t < s.kd; ++t) {
    for (int64_t ij = 0; ij < s.kh * s.kw; ++ij) {
      const int64_t w3 = (t * s.kh * s.kw + ij) * block, w2 = (ij * s.kd + t) * block;
      std::copy_n(w + (to_3d ? w2 : w3), block, out + (to_3d ? w3 : w2));
    }
  }
}

template <typename T>
void Conv3D(TFJIT_CONV3D_PARAMS(T)) {
  const Conv3DShape s = TFJIT_CONV3D_SHAPE;
  Temp<T, 1> p = DepthTaps(a, s), w2(s.kh * s.kw * s.taps_depth() * s.out_depth);
  Filter2D(w2.data(), b, s, false);
  Conv2D<T>(out, p.data(), w2.data(), s.images(), s.rows, s.cols, s.taps_depth(), s.kh, s.kw,
            s.out_depth, s.out_rows, s.out_cols, s.row_stride, s.col_stride, 1, 1, s.top,
            s.bottom, s.left, s.right);
}

// dx: the 2-D input gradient dP, each tap's share added back to the plane it was
// gathered from (taps in order).
template <typename T>
void Conv3DBackpropInput(TFJIT_CONV3D_PARAMS(T)) {
  const Conv3DShape s = TFJIT_CONV3D_SHAPE;
  Temp<T, 1> w2(s.kh * s.kw * s.taps_depth() * s.out_depth), dp(s.images() * s.rows * s.cols * s.taps_depth());
  Filter2D(w2.data(), a, s, false);
  Conv2DBackpropInput<T>(dp.data(), w2.data(), b, s.images(), s.rows, s.cols, s.taps_depth(),
                         s.kh, s.kw, s.out_depth, s.out_rows, s.out_cols, s.row_stride,
                         s.col_stride, s.top, s.bottom, s.left, s.right);
  std::fill(out, out + s.batch * s.planes * s.rows * s.cols * s.depth, T(0));
  s.ForEachTap([&](int64_t from, int64_t to, int64_t positions) {
    for (int64_t q = 0; q < positions; ++q) {
      const T* src = dp.data() + from + q * s.taps_depth();
      T* dst = out + to + q * s.depth;
      for (int64_t c = 0; c < s.depth; ++c) dst[c] += src[c];
    }
  });
}

// dw: the 2-D filter gradient of P against the output gradient, read back as 3-D.
template <typename T>
void Conv3DBackpropFilter(TFJIT_CONV3D_PARAMS(T)) {
  const Conv3DShape s = TFJIT_CONV3D_SHAPE;
  Temp<T, 1> p = DepthTaps(a, s), dw2(s.kh * s.kw * s.taps_depth() * s.out_depth);
  Conv2DBackpropFilter<T>(dw2.data(), p.data(), b, s.images(), s.rows, s.cols, s.taps_depth(),
                          s.kh, s.kw, s.out_depth, s.out_rows, s.out_cols, s.row_stride,
                          s.col_stride, s.top, s.bottom, s.left, s.right);
  Filter2D(out, dw2.data(), s, true);
}

}  // namespace

// The table's entries for one dtype, in TFJIT_LINALG_FIELDS order.
using namespace tfjit_host;  // NOLINT: the decompositions' instances, by name

#define TFJIT_ENTRIES(T)                                                            \
  Dot<T>, Conv2D<T>, Conv2DBackpropInput<T>, Conv2DBackpropFilter<T>,               \
      DepthwiseBackpropInput<T>, DepthwiseBackpropFilter<T>, Qr<T>, TriangularSolve<T>,   \
      MatrixSolve<T>, Cholesky<T>, MatrixInverse<T>, Determinant<T>, LogDeterminant<T>,     \
      Lu<T>, MatrixSolveLs<T>, SelfAdjointEig<T>, Svd<T>, Conv3D<T>,             \
      Conv3DBackpropInput<T>, Conv3DBackpropFilter<T>

TFJIT_EXPORT const TfjitLinalg* tfjit_linalg_table() {
  static const TfjitLinalg table = {sizeof(TfjitLinalg), TFJIT_ENTRIES(float), TFJIT_ENTRIES(double)};
  return &table;
}
