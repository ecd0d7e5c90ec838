// The decompositions of the host library (linalg_decompositions.cc and
// linalg_spectral.cc), which linalg.cc puts into its table (tfjit_linalg_table):
// declared here, instantiated there for float and double. Arguments as in linalg.h.
#ifndef TFJIT_RUNTIME_LINALG_DECOMPOSITIONS_H_
#define TFJIT_RUNTIME_LINALG_DECOMPOSITIONS_H_

#include <cstdint>

#include "Eigen/Core"
#include "linalg.h"

namespace tfjit_host {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
void Qr(TFJIT_QR_PARAMS(T));
template <typename T>
int32_t TriangularSolve(TFJIT_SOLVE_PARAMS(T));
template <typename T>
int32_t MatrixSolve(TFJIT_SOLVE_PARAMS(T));
template <typename T>
int32_t MatrixInverse(TFJIT_MATRIX_PARAMS(T));
template <typename T>
int32_t Cholesky(TFJIT_MATRIX_PARAMS(T));
template <typename T>
int32_t Determinant(TFJIT_MATRIX_PARAMS(T));
template <typename T>
int32_t LogDeterminant(TFJIT_MATRIX_PARAMS(T));
template <typename T>
int32_t Lu(TFJIT_LU_PARAMS(T));
template <typename T>
int32_t MatrixSolveLs(TFJIT_SOLVE_LS_PARAMS(T));
template <typename T>
int32_t SelfAdjointEig(TFJIT_SPECTRAL_PARAMS(T));
template <typename T>
int32_t Svd(TFJIT_SPECTRAL_PARAMS(T));

}  // namespace tfjit_host

#endif  // TFJIT_RUNTIME_LINALG_DECOMPOSITIONS_H_
