// The runtime library's FFTs (called as tf_kernels.cc's entry points are, by
// codegen/library.py):
//   tfjit_rt_fft_<t>(runtime, kernel, out, in, batch, d0, d1, d2, l0, l1, l2, rank, type)
// TF's FFT, IFFT, RFFT, IRFFT kernel (type 0-3, ir/ops.py FFT_TYPES) of `rank` (1-3:
// FFT2D, ...) over `batch` tensors whose transformed dims are d0..d(rank-1), with
// fft_length l0..l(rank-1) (the unused ones are 1). A complex tensor is its
// std::complex<t> buffer; ir/module.py's `fft` gives the shapes. Under TfjitLaunch
// this runs TF's own CPU kernel (DUCC's FFT; TF has no oneDNN one, so `kernel` is
// ignored), so results are TF's bit for bit. Without a launch (the host runner)
// there is no FFT: the call returns 1 (linalg.cc has no twin of DUCC's transforms,
// and tfjit-aot refuses FFTs at compile time).

#include <complex>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "linalg.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tf_kernels.h"

namespace tensorflow {
namespace tfjit {
namespace {

constexpr const char* kFftOps[4] = {"FFT", "IFFT", "RFFT", "IRFFT"};

template <typename T>
int32_t Fft(void* runtime, T* out, const T* in, const int64_t dims[3], const int64_t lengths[3],
            int32_t rank, int32_t type, int64_t batch) {
  if (runtime == nullptr || rank < 1 || rank > 3 || type < 0 || type > 3) return 1;
  const DataType real = DataTypeToEnum<T>::v();
  const DataType complex = DataTypeToEnum<std::complex<T>>::v();
  const bool real_in = type == 2, real_out = type == 3;
  TensorShape in_shape({batch}), out_shape({batch});
  for (int i = 0; i < rank; ++i) {
    in_shape.AddDim(dims[i]);
    const bool halved = type == 2 && i == rank - 1 && lengths[i] != 0;
    out_shape.AddDim(halved ? lengths[i] / 2 + 1 : lengths[i]);
  }
  const std::string op = absl::StrCat(kFftOps[type], rank == 1 ? "" : absl::StrCat(rank, "D"));
  auto attrs = [&](NodeDef* def) {
    AddNodeAttr("Tcomplex", complex, def);
    if (type >= 2) AddNodeAttr("Treal", real, def);
  };
  const KernelSpec spec{op.c_str(), complex, type >= 2 ? 2 : 1, "", attrs};
  Tensor inputs[2] = {Borrow(real_in ? real : complex, in_shape, in), Tensor(DT_INT32, TensorShape({rank}))};
  auto fft_length = inputs[1].vec<int32_t>();
  for (int i = 0; i < rank; ++i) fft_length(i) = static_cast<int32_t>(lengths[i]);
  const Tensor outs[1] = {Borrow(real_out ? real : complex, out_shape, out)};
  return RunDefault(runtime, spec, absl::MakeSpan(inputs, type >= 2 ? 2 : 1), outs);
}

}  // namespace
}  // namespace tfjit
}  // namespace tensorflow

#define TFJIT_FFT(suffix, T)                                                                    \
  TFJIT_EXPORT int32_t tfjit_rt_fft_##suffix(void* runtime, int32_t, T* out, const T* in,        \
                                             int64_t batch, int64_t d0, int64_t d1, int64_t d2,  \
                                             int64_t l0, int64_t l1, int64_t l2, int32_t rank,   \
                                             int32_t type) {                                     \
    const int64_t dims[3] = {d0, d1, d2}, lengths[3] = {l0, l1, l2};                             \
    return tensorflow::tfjit::Fft<T>(runtime, out, in, dims, lengths, rank, type, batch);        \
  }

TFJIT_FFT(f32, float)
TFJIT_FFT(f64, double)
