// The host library's spectral decompositions (see linalg_decompositions.cc for
// why they are a translation unit of their own): Eigen's SelfAdjointEigenSolver and
// BDCSVD, as TF's SelfAdjointEigV2 and Svd kernels call them, matrix by matrix on
// the calling thread. Arguments and results: linalg.h.

#include <algorithm>
#include <cstdint>

#include "Eigen/Eigenvalues"
#include "Eigen/SVD"
#include "linalg_decompositions.h"

namespace tfjit_host {

// TF's SelfAdjointEigV2 kernel: Eigen's SelfAdjointEigenSolver of the row-major
// matrix (its lower triangle), eigenvalues ascending; 1 where it does not converge.
template <typename T>
int32_t SelfAdjointEig(TFJIT_SPECTRAL_PARAMS(T)) {
  int64_t vectors_at, unused;
  TfjitSpectralOffsets(batch, m, m, 0, &vectors_at, &unused);
  Eigen::SelfAdjointEigenSolver<RowMatrix<T>> eig(m);
  for (int64_t i = 0; i < batch; ++i) {
    eig.compute(Eigen::Map<const RowMatrix<T>>(x + i * m * m, m, m),
                vectors ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    if (eig.info() != Eigen::Success) return 1;
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(out + i * m, m) = eig.eigenvalues();
    if (vectors) Eigen::Map<RowMatrix<T>>(out + vectors_at + i * m * m, m, m) = eig.eigenvectors();
  }
  return 0;
}

// TF's Svd kernel: Eigen's BDCSVD of the row-major matrix, thin or full U and V.
template <typename T>
int32_t Svd(TFJIT_SPECTRAL_PARAMS(T)) {
  const int64_t k = std::min(m, n), p = full_matrices ? m : k, q = full_matrices ? n : k;
  int64_t u_at, v_at;
  TfjitSpectralOffsets(batch, m, n, full_matrices, &u_at, &v_at);
  const int options = !vectors ? 0
                      : full_matrices ? Eigen::ComputeFullU | Eigen::ComputeFullV
                                      : Eigen::ComputeThinU | Eigen::ComputeThinV;
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::BDCSVD<RowMatrix<T>> svd(Eigen::Map<const RowMatrix<T>>(x + i * m * n, m, n), options);
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(out + i * k, k) = svd.singularValues();
    if (vectors) {
      Eigen::Map<RowMatrix<T>>(out + u_at + i * m * p, m, p) = svd.matrixU();
      Eigen::Map<RowMatrix<T>>(out + v_at + i * n * q, n, q) = svd.matrixV();
    }
  }
  return 0;
}

template int32_t SelfAdjointEig<float>(TFJIT_SPECTRAL_PARAMS(float));
template int32_t SelfAdjointEig<double>(TFJIT_SPECTRAL_PARAMS(double));
template int32_t Svd<float>(TFJIT_SPECTRAL_PARAMS(float));
template int32_t Svd<double>(TFJIT_SPECTRAL_PARAMS(double));

}  // namespace tfjit_host
