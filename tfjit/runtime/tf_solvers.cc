// The runtime library's dense solvers (ABI: linalg.h, called as tf_kernels.cc's
// entry points are, by codegen/library.py):
//   tfjit_rt_{triangular_solve,matrix_solve}_<t>(runtime, kernel, TFJIT_SOLVE_PARAMS)
//   tfjit_rt_{cholesky,matrix_inverse,determinant,log_determinant}_<t>(runtime, kernel,
//                                                                     TFJIT_MATRIX_PARAMS)
//   tfjit_rt_lu_<t>(runtime, kernel, TFJIT_LU_PARAMS)
//   tfjit_rt_matrix_solve_ls_<t>(runtime, kernel, TFJIT_SOLVE_LS_PARAMS)
//   tfjit_rt_{self_adjoint_eig,svd}_<t>(runtime, kernel, TFJIT_SPECTRAL_PARAMS)
// Under TfjitLaunch each runs TF's own CPU kernel (MatrixTriangularSolve,
// MatrixSolve, Cholesky, MatrixInverse, MatrixDeterminant, LogMatrixDeterminant,
// SelfAdjointEigV2, Svd;
// TF has no oneDNN ones, so `kernel` is ignored) on tfjit's buffers, so results and
// failures are TF's: MatrixSolve/MatrixInverse/Lu of a singular matrix return 1 with
// TF's InvalidArgument status in the runtime context, as do MatrixSolveLs of a
// negative l2 or (fast) a rank-deficient matrix and SelfAdjointEigV2 where
// Eigen's solver does not converge. Without a launch (the host
// runner) they run linalg.cc's Eigen code, which fails the same calls.

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "linalg.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/types.h"
#include "tf_kernels.h"

namespace tensorflow {
namespace tfjit {
namespace {

template <typename Fn>
using HostFn = Fn TfjitLinalg::*;

// The host library's `fn` on `args`; 1, a failed call, when the host runner has not
// handed the library over (runtime/host.py always does first).
template <typename Fn, typename... Args>
int32_t OnHost(HostFn<Fn> fn, Args... args) {
  const TfjitLinalg* table = HostLinalg();
  return table == nullptr ? 1 : (table->*fn)(args...);
}

TensorShape Matrices(int64_t batch, int64_t rows, int64_t cols) {
  return TensorShape({batch, rows, cols});
}

// MatrixTriangularSolve (lower, adjoint) or MatrixSolve (adjoint) of a [batch, m, m]
// and b [batch, m, n].
template <typename T>
int32_t Solve(bool triangular, void* runtime, TFJIT_SOLVE_PARAMS(T),
              HostFn<TfjitSolveFn<T>> eigen) {
  if (runtime == nullptr) return OnHost(eigen, TFJIT_SOLVE_ARGS);
  const DataType dtype = DataTypeToEnum<T>::v();
  auto attrs = [&](NodeDef* def) {
    if (triangular) AddNodeAttr("lower", lower != 0, def);
    AddNodeAttr("adjoint", adjoint != 0, def);
  };
  const KernelSpec spec{triangular ? "MatrixTriangularSolve" : "MatrixSolve", dtype, 2,
                        absl::StrCat(triangular && lower, adjoint), attrs};
  Tensor inputs[2] = {Borrow(dtype, Matrices(batch, m, m), a), Borrow(dtype, Matrices(batch, m, n), b)};
  const Tensor outs[1] = {Borrow(dtype, Matrices(batch, m, n), out)};
  return RunDefault(runtime, spec, inputs, outs);
}

// Cholesky, MatrixInverse (adjoint), MatrixDeterminant, LogMatrixDeterminant of
// a [batch, m, m].
template <typename T>
int32_t OfMatrix(const char* op, void* runtime, TFJIT_MATRIX_PARAMS(T),
                 HostFn<TfjitMatrixFn<T>> eigen) {
  if (runtime == nullptr) return OnHost(eigen, TFJIT_MATRIX_ARGS);
  const DataType dtype = DataTypeToEnum<T>::v();
  const bool inverse = std::string_view(op) == "MatrixInverse";
  auto attrs = [&](NodeDef* def) {
    if (inverse) AddNodeAttr("adjoint", adjoint != 0, def);
  };
  const KernelSpec spec{op, dtype, 1, absl::StrCat(inverse && adjoint), attrs};
  Tensor inputs[1] = {Borrow(dtype, Matrices(batch, m, m), a)};
  if (std::string_view(op) == "LogMatrixDeterminant") {
    const Tensor outs[2] = {Borrow(dtype, TensorShape({batch}), out),
                            Borrow(dtype, TensorShape({batch}), out + TfjitLogDetOffset(batch))};
    return RunDefault(runtime, spec, inputs, outs);
  }
  const bool determinant = std::string_view(op) == "MatrixDeterminant";
  // TF's Cholesky writes only the lower triangle of a matrix it cannot factor (NaN),
  // leaving the rest as allocated: tfjit's buffer holds zeros there instead.
  if (std::string_view(op) == "Cholesky") std::fill(out, out + batch * m * m, T(0));
  const Tensor outs[1] = {Borrow(dtype, determinant ? TensorShape({batch}) : Matrices(batch, m, m), out)};
  return RunDefault(runtime, spec, inputs, outs);
}

// Lu of a [batch, m, m]: TF's factors are tfjit's buffer; its int64 permutation is
// a tensor of its own, copied in as T (exact: m < 2^24, ir/module.py's lu).
template <typename T>
int32_t LuOf(void* runtime, TFJIT_LU_PARAMS(T), HostFn<TfjitLuFn<T>> eigen) {
  if (runtime == nullptr) return OnHost(eigen, TFJIT_LU_ARGS);
  const DataType dtype = DataTypeToEnum<T>::v();
  auto attrs = [&](NodeDef* def) { AddNodeAttr("output_idx_type", DT_INT64, def); };
  const KernelSpec spec{"Lu", dtype, 1, "int64", attrs};
  Tensor inputs[1] = {Borrow(dtype, Matrices(batch, m, m), a)};
  Tensor perm(DT_INT64, TensorShape({batch, m}));
  const Tensor outs[2] = {Borrow(dtype, Matrices(batch, m, m), out), perm};
  const int32_t rc = RunDefault(runtime, spec, inputs, outs);
  const int64_t* indices = perm.flat<int64_t>().data();
  std::copy(indices, indices + batch * m, out + TfjitLuPermOffset(batch, m));
  return rc;
}

// MatrixSolveLs (fast) of a [batch, m, n], b [batch, m, k] and the scalar *l2.
template <typename T>
int32_t SolveLs(void* runtime, TFJIT_SOLVE_LS_PARAMS(T), HostFn<TfjitSolveLsFn<T>> eigen) {
  if (runtime == nullptr) return OnHost(eigen, TFJIT_SOLVE_LS_ARGS);
  const DataType dtype = DataTypeToEnum<T>::v();
  auto attrs = [&](NodeDef* def) { AddNodeAttr("fast", fast != 0, def); };
  const KernelSpec spec{"MatrixSolveLs", dtype, 3, absl::StrCat(fast != 0), attrs};
  Tensor inputs[3] = {Borrow(dtype, Matrices(batch, m, n), a), Borrow(dtype, Matrices(batch, m, k), b),
                      Borrow(DT_DOUBLE, TensorShape({}), l2)};
  const Tensor outs[1] = {Borrow(dtype, Matrices(batch, n, k), out)};
  return RunDefault(runtime, spec, inputs, outs);
}

// SelfAdjointEigV2 (compute_v: `vectors`) of x [batch, m, m] or Svd (compute_uv:
// `vectors`, full_matrices) of x [batch, m, n]: TF's outputs are the packed parts.
// Without the vectors TF's kernel still has a second (and third) output, a scalar it
// leaves unset: those are scalars of TF's own here, dropped after the run.
template <typename T>
int32_t Spectral(bool svd, void* runtime, TFJIT_SPECTRAL_PARAMS(T), HostFn<TfjitSpectralFn<T>> eigen) {
  if (runtime == nullptr) return OnHost(eigen, TFJIT_SPECTRAL_ARGS);
  const DataType dtype = DataTypeToEnum<T>::v();
  auto attrs = [&](NodeDef* def) {
    AddNodeAttr(svd ? "compute_uv" : "compute_v", vectors != 0, def);
    if (svd) AddNodeAttr("full_matrices", full_matrices != 0, def);
  };
  const KernelSpec spec{svd ? "Svd" : "SelfAdjointEigV2", dtype, 1,
                        absl::StrCat(vectors != 0, svd && full_matrices), attrs};
  const int64_t k = std::min(m, n), p = full_matrices ? m : k, q = full_matrices ? n : k;
  int64_t second, third;
  TfjitSpectralOffsets(batch, m, n, svd && full_matrices, &second, &third);
  Tensor inputs[1] = {Borrow(dtype, Matrices(batch, m, n), x)};
  const Tensor unset(dtype, TensorShape({}));
  const Tensor outs[3] = {
      Borrow(dtype, TensorShape({batch, k}), out),
      !vectors ? unset : Borrow(dtype, svd ? Matrices(batch, m, p) : Matrices(batch, m, m), out + second),
      !vectors ? unset : Borrow(dtype, Matrices(batch, n, q), out + third)};
  return RunDefault(runtime, spec, inputs, absl::MakeConstSpan(outs, svd ? 3 : 2));
}

}  // namespace
}  // namespace tfjit
}  // namespace tensorflow

#define TFJIT_SOLVER(name, triangular, suffix, T)                                              \
  TFJIT_EXPORT int32_t tfjit_rt_##name##_##suffix(void* runtime, int32_t,                        \
                                                  TFJIT_SOLVE_PARAMS(T)) {                       \
    return tensorflow::tfjit::Solve<T>(triangular, runtime, TFJIT_SOLVE_ARGS,                    \
                                       &TfjitLinalg::name##_##suffix);                            \
  }
#define TFJIT_OF_MATRIX(name, op, suffix, T)                                                     \
  TFJIT_EXPORT int32_t tfjit_rt_##name##_##suffix(void* runtime, int32_t,                        \
                                                  TFJIT_MATRIX_PARAMS(T)) {                      \
    return tensorflow::tfjit::OfMatrix<T>(op, runtime, TFJIT_MATRIX_ARGS,                        \
                                          &TfjitLinalg::name##_##suffix);                         \
  }
#define TFJIT_SPECTRAL(name, svd, suffix, T)                                                     \
  TFJIT_EXPORT int32_t tfjit_rt_##name##_##suffix(void* runtime, int32_t,                        \
                                                  TFJIT_SPECTRAL_PARAMS(T)) {                    \
    return tensorflow::tfjit::Spectral<T>(svd, runtime, TFJIT_SPECTRAL_ARGS,                     \
                                          &TfjitLinalg::name##_##suffix);                         \
  }
#define TFJIT_LU(suffix, T)                                                                      \
  TFJIT_EXPORT int32_t tfjit_rt_lu_##suffix(void* runtime, int32_t, TFJIT_LU_PARAMS(T)) {        \
    return tensorflow::tfjit::LuOf<T>(runtime, TFJIT_LU_ARGS, &TfjitLinalg::lu_##suffix);         \
  }
#define TFJIT_SOLVE_LS(suffix, T)                                                                 \
  TFJIT_EXPORT int32_t tfjit_rt_matrix_solve_ls_##suffix(void* runtime, int32_t,                 \
                                                         TFJIT_SOLVE_LS_PARAMS(T)) {             \
    return tensorflow::tfjit::SolveLs<T>(runtime, TFJIT_SOLVE_LS_ARGS,                           \
                                         &TfjitLinalg::matrix_solve_ls_##suffix);                 \
  }
#define TFJIT_SOLVERS(suffix, T)                                                                 \
  TFJIT_SOLVER(triangular_solve, true, suffix, T)                                                \
  TFJIT_SOLVER(matrix_solve, false, suffix, T)                                                   \
  TFJIT_OF_MATRIX(cholesky, "Cholesky", suffix, T)                                               \
  TFJIT_OF_MATRIX(matrix_inverse, "MatrixInverse", suffix, T)                                    \
  TFJIT_OF_MATRIX(determinant, "MatrixDeterminant", suffix, T)                                   \
  TFJIT_OF_MATRIX(log_determinant, "LogMatrixDeterminant", suffix, T)                           \
  TFJIT_LU(suffix, T)                                                                            \
  TFJIT_SOLVE_LS(suffix, T)                                                                      \
  TFJIT_SPECTRAL(self_adjoint_eig, false, suffix, T)                                             \
  TFJIT_SPECTRAL(svd, true, suffix, T)

TFJIT_SOLVERS(f32, float)
TFJIT_SOLVERS(f64, double)
