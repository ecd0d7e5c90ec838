// The host library's decompositions (linalg.cc has its matmul and convolutions
// and the table that lists every function; linalg_spectral.cc the eigensolver and
// the SVD): Eigen's HouseholderQR and the dense solvers as TF's CPU kernels compute
// them, matrix by matrix on the calling thread. Translation units of their own so
// that their -O3 compiles run side by side (runtime/build.py compiles a library's
// sources in parallel; each took 0.5-2 minutes of one core). Arguments and
// results: linalg.h.

#include "linalg_decompositions.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "Eigen/Cholesky"
#include "Eigen/LU"
#include "Eigen/QR"

namespace tfjit_host {

// TF's Qr kernel (qr_op_impl.h), matrix by matrix: Eigen's HouseholderQR of a
// row-major matrix; Q expanded from the reflectors (times the first k columns of
// the identity for the reduced form), R the upper triangle of the top k rows.
template <typename T>
void Qr(TFJIT_QR_PARAMS(T)) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t k = full_matrices ? m : std::min(m, n);
  for (int64_t b = 0; b < batch; ++b) {
    Eigen::Map<const Matrix> a(x + b * m * n, m, n);
    Eigen::Map<Matrix> q(out + b * m * k, m, k);
    Eigen::Map<Matrix> r(out + TfjitQrROffset(batch, m, n, full_matrices) + b * k * n, k, n);
    Eigen::HouseholderQR<Matrix> qr(a);
    if (full_matrices) {
      q = qr.householderQ();
    } else {
      Matrix identity = Matrix::Identity(m, k);
      q = qr.householderQ() * identity;
    }
    r = qr.matrixQR().block(0, 0, k, n).template triangularView<Eigen::Upper>();
  }
}

// The dense solvers as TF's CPU kernels compute them (linalg/*_op.cc), matrix by
// matrix on row-major maps.

// MatrixTriangularSolve: Eigen's triangular solve of the lower or upper triangle
// (or its transpose); no pivot check, a zero on the diagonal gives inf/NaN.
template <typename T>
int32_t TriangularSolve(TFJIT_SOLVE_PARAMS(T)) {
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::Map<const RowMatrix<T>> matrix(a + i * m * m, m, m);
    Eigen::Map<const RowMatrix<T>> rhs(b + i * m * n, m, n);
    Eigen::Map<RowMatrix<T>> x(out + i * m * n, m, n);
    if (lower) {
      auto triangle = matrix.template triangularView<Eigen::Lower>();
      if (adjoint) x.noalias() = triangle.adjoint().solve(rhs);
      else x.noalias() = triangle.solve(rhs);
    } else {
      auto triangle = matrix.template triangularView<Eigen::Upper>();
      if (adjoint) x.noalias() = triangle.adjoint().solve(rhs);
      else x.noalias() = triangle.solve(rhs);
    }
  }
  return 0;
}

// The partially pivoted LU of op(a) (MatrixSolve, MatrixInverse); false where a
// pivot is exactly zero, TF's "not invertible" check.
template <typename T>
bool Factor(Eigen::PartialPivLU<RowMatrix<T>>& lu, const T* a, int64_t m, bool adjoint) {
  Eigen::Map<const RowMatrix<T>> matrix(a, m, m);
  if (adjoint) lu.compute(matrix.adjoint());
  else lu.compute(matrix);
  return lu.matrixLU().diagonal().cwiseAbs().minCoeff() > T(0);
}

template <typename T>
int32_t MatrixSolve(TFJIT_SOLVE_PARAMS(T)) {
  Eigen::PartialPivLU<RowMatrix<T>> lu(m);
  for (int64_t i = 0; i < batch; ++i) {
    if (!Factor(lu, a + i * m * m, m, adjoint)) return 1;
    Eigen::Map<RowMatrix<T>>(out + i * m * n, m, n) =
        lu.solve(Eigen::Map<const RowMatrix<T>>(b + i * m * n, m, n));
  }
  return 0;
}

template <typename T>
int32_t MatrixInverse(TFJIT_MATRIX_PARAMS(T)) {
  Eigen::PartialPivLU<RowMatrix<T>> lu(m);
  for (int64_t i = 0; i < batch; ++i) {
    if (!Factor(lu, a + i * m * m, m, adjoint)) return 1;
    Eigen::Map<RowMatrix<T>>(out + i * m * m, m, m) = lu.inverse();
  }
  return 0;
}

// Cholesky: Eigen's LLT of the lower triangle; where it fails (not positive
// definite), NaN in the lower triangle and, unlike TF's kernel (which leaves
// it as allocated), zeros above.
template <typename T>
int32_t Cholesky(TFJIT_MATRIX_PARAMS(T)) {
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::LLT<RowMatrix<T>> llt(Eigen::Map<const RowMatrix<T>>(a + i * m * m, m, m));
    Eigen::Map<RowMatrix<T>> l(out + i * m * m, m, m);
    if (llt.info() == Eigen::Success) {
      l = llt.matrixL();
    } else {
      l.setZero();
      l.template triangularView<Eigen::Lower>().fill(std::numeric_limits<T>::quiet_NaN());
    }
  }
  return 0;
}

// TF's SLogDet: sign and log |det| from the partially pivoted LU of a column-major
// copy; a non-finite log becomes sign 0 and log +-inf.
template <typename T>
void SLogDet(const T* a, int64_t m, T* sign, T* log_abs_det) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  Eigen::PartialPivLU<Matrix> lu(Matrix(Eigen::Map<const RowMatrix<T>>(a, m, m)));
  const Matrix factors = lu.matrixLU();
  const auto diagonal = factors.diagonal().array().eval();
  const auto magnitude = diagonal.cwiseAbs().eval();
  T log = magnitude.log().sum();
  T s = T(lu.permutationP().determinant()) * (diagonal / magnitude).prod();
  if (!std::isfinite(log)) {
    s = T(0);
    log = log > 0 ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
  }
  *sign = s;
  *log_abs_det = log;
}

template <typename T>
int32_t Determinant(TFJIT_MATRIX_PARAMS(T)) {
  for (int64_t i = 0; i < batch; ++i) {
    T sign, log;
    SLogDet(a + i * m * m, m, &sign, &log);
    out[i] = sign * std::exp(log);
  }
  return 0;
}

template <typename T>
int32_t LogDeterminant(TFJIT_MATRIX_PARAMS(T)) {
  for (int64_t i = 0; i < batch; ++i) SLogDet(a + i * m * m, m, out + i, out + TfjitLogDetOffset(batch) + i);
  return 0;
}

// TF's Lu kernel (lu_op.cc), matrix by matrix: Eigen's column-major PartialPivLU
// of the row-major matrix; the permutation is P's transpose's indices.
template <typename T>
int32_t Lu(TFJIT_LU_PARAMS(T)) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::PartialPivLU<Matrix> lu(Matrix(Eigen::Map<const RowMatrix<T>>(a + i * m * m, m, m)));
    Eigen::Map<RowMatrix<T>> factors(out + i * m * m, m, m);
    factors = lu.matrixLU();
    const Eigen::PermutationMatrix<Eigen::Dynamic, Eigen::Dynamic, int64_t> perm =
        lu.permutationP().transpose();
    T* indices = out + TfjitLuPermOffset(batch, m) + i * m;
    for (int64_t j = 0; j < m; ++j) indices[j] = T(perm.indices()(j));
    if (!(factors.diagonal().cwiseAbs().minCoeff() > T(0))) return 1;
  }
  return 0;
}

// TF's MatrixSolveLs kernel (matrix_solve_ls_op_impl.h), matrix by matrix: fast,
// the lower triangle of the (regularised) Gram matrix, Eigen's LLT of it, then the
// normal equations of the first kind (m >= n) or second kind (m < n); else the
// complete orthogonal decomposition's minimum-norm solution.
template <typename T>
int32_t MatrixSolveLs(TFJIT_SOLVE_LS_PARAMS(T)) {
  if (!(*l2 >= 0)) return 1;
  const int64_t g = m >= n ? n : m;
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::Map<const RowMatrix<T>> matrix(a + i * m * n, m, n);
    Eigen::Map<const RowMatrix<T>> rhs(b + i * m * k, m, k);
    Eigen::Map<RowMatrix<T>> x(out + i * n * k, n, k);
    if (!fast) {
      x = matrix.completeOrthogonalDecomposition().solve(rhs);
      continue;
    }
    RowMatrix<T> gramian(g, g);
    if (m >= n) gramian.template triangularView<Eigen::Lower>() = matrix.adjoint() * matrix;
    else gramian.template triangularView<Eigen::Lower>() = matrix * matrix.adjoint();
    if (*l2 > 0) gramian += (T(*l2) * RowMatrix<T>::Ones(g, 1)).asDiagonal();
    const Eigen::LLT<Eigen::Ref<RowMatrix<T>>, Eigen::Lower> llt(gramian);
    if (llt.info() != Eigen::Success) return 1;
    if (m >= n) {
      x.noalias() = matrix.adjoint() * rhs;
      llt.solveInPlace(x);
    } else {
      x.noalias() = matrix.adjoint() * llt.solve(rhs);
    }
  }
  return 0;
}

#define TFJIT_INSTANTIATE(T)                                          \
  template void Qr<T>(TFJIT_QR_PARAMS(T));                            \
  template int32_t TriangularSolve<T>(TFJIT_SOLVE_PARAMS(T));         \
  template int32_t MatrixSolve<T>(TFJIT_SOLVE_PARAMS(T));             \
  template int32_t MatrixInverse<T>(TFJIT_MATRIX_PARAMS(T));          \
  template int32_t Cholesky<T>(TFJIT_MATRIX_PARAMS(T));               \
  template int32_t Determinant<T>(TFJIT_MATRIX_PARAMS(T));            \
  template int32_t LogDeterminant<T>(TFJIT_MATRIX_PARAMS(T));         \
  template int32_t Lu<T>(TFJIT_LU_PARAMS(T));                         \
  template int32_t MatrixSolveLs<T>(TFJIT_SOLVE_LS_PARAMS(T));

TFJIT_INSTANTIATE(float)
TFJIT_INSTANTIATE(double)

}  // namespace tfjit_host
