// RMSNorm (seed 000 eq. 2):  y = g ⊙ x / sqrt(mean(x²) + ε),  one row of `dim` values at a time.
//
// With r = (mean(x²) + ε)^(-1/2) saved per row (rstd):
//   forward   y_j  = g_j · x_j · r
//   backward  dx_k = r · g_k · dy_k − (r³ / dim) · x_k · Σ_j g_j · dy_j · x_j
//             dg_j += Σ_rows dy_j · x_j · r
// (∂r/∂x_k = −r³ · x_k / dim.)
//
// The sum of squares is accumulated in double, so ε = 1e-12 still matters in fp32 runs where
// mean(x²) is tiny (seed 000 §4.6: at γ = 1 the hidden-state variance can fall below ε).
// QK-norm uses the same kernels over head vectors: rows = N · heads, dim = head_dim, one gain
// vector g[head_dim] shared by all heads (rmsnorm_heads_* below).
//
// Determinism: dx is computed per row; dg is a second pass over fixed column blocks, each
// summed over rows in order by one thread (in double), independent of the thread count.
#pragma once

#include <cmath>
#include <cstdint>

namespace gc::tree::cpu {

inline constexpr int kRmsNormColumnBlock = 32;

// Where row r of x (and of dx) starts. Dense by default (r · dim); QK-norm over the stacked Q/K/V
// projection (model_impl.hpp, kQkvStacked) reads q's or k's heads inside rows of the stack:
// groups of group_rows rows of dim values (a token's heads), groups group_stride apart.
struct RowLayout {
  std::int64_t group_rows = 1;
  std::int64_t group_stride = 0;  // 0: dense
  std::int64_t offset(std::int64_t row, int dim) const {
    return group_stride == 0 ? row * dim : (row / group_rows) * group_stride + (row % group_rows) * dim;
  }
};

// rstd[rows] receives r for each row (needed by the backward pass).
template <typename T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* g, std::int64_t rows, int dim, double eps,
                     RowLayout x_rows = {}) {
#pragma omp parallel for
  for (std::int64_t row = 0; row < rows; ++row) {
    const T* xr = x + x_rows.offset(row, dim);
    T* yr = y + row * dim;
    double sum_sq = 0.0;
    for (int j = 0; j < dim; ++j) {
      sum_sq += double(xr[j]) * double(xr[j]);
    }
    const double r = 1.0 / std::sqrt(sum_sq / dim + eps);
    for (int j = 0; j < dim; ++j) {
      yr[j] = T(double(g[j]) * double(xr[j]) * r);
    }
    rstd[row] = T(r);
  }
}

// dx = ∂L/∂x (overwritten, or added when accumulate_dx). Uses the rstd saved by the forward.
template <typename T>
void rmsnorm_backward_input(T* dx, const T* dy, const T* x, const T* g, const T* rstd, std::int64_t rows, int dim,
                            bool accumulate_dx = false, RowLayout x_rows = {}) {
#pragma omp parallel for
  for (std::int64_t row = 0; row < rows; ++row) {
    const T* xr = x + x_rows.offset(row, dim);
    const T* dyr = dy + row * dim;
    T* dxr = dx + x_rows.offset(row, dim);
    const double r = double(rstd[row]);
    double dot = 0.0;  // Σ_j g_j dy_j x_j
    for (int j = 0; j < dim; ++j) {
      dot += double(g[j]) * double(dyr[j]) * double(xr[j]);
    }
    const double c = r * r * r * dot / dim;
    for (int j = 0; j < dim; ++j) {
      const double v = r * double(g[j]) * double(dyr[j]) - c * double(xr[j]);
      dxr[j] = accumulate_dx ? T(double(dxr[j]) + v) : T(v);
    }
  }
}

// dg += Σ_rows dy ⊙ x · r.
template <typename T>
void rmsnorm_backward_gain(T* dg, const T* dy, const T* x, const T* rstd, std::int64_t rows, int dim,
                           RowLayout x_rows = {}) {
  const int blocks = (dim + kRmsNormColumnBlock - 1) / kRmsNormColumnBlock;
#pragma omp parallel for
  for (int blk = 0; blk < blocks; ++blk) {
    const int j0 = blk * kRmsNormColumnBlock;
    const int width = j0 + kRmsNormColumnBlock < dim ? kRmsNormColumnBlock : dim - j0;
    double acc[kRmsNormColumnBlock] = {};
    for (std::int64_t row = 0; row < rows; ++row) {
      const T* xr = x + x_rows.offset(row, dim) + j0;
      const T* dyr = dy + row * dim + j0;
      const double r = double(rstd[row]);
      for (int j = 0; j < width; ++j) {
        acc[j] += double(dyr[j]) * double(xr[j]) * r;
      }
    }
    for (int j = 0; j < width; ++j) {
      dg[j0 + j] += T(acc[j]);
    }
  }
}

template <typename T>
void rmsnorm_backward(T* dx, T* dg, const T* dy, const T* x, const T* g, const T* rstd, std::int64_t rows, int dim,
                      bool accumulate_dx = false, RowLayout x_rows = {}) {
  rmsnorm_backward_input(dx, dy, x, g, rstd, rows, dim, accumulate_dx, x_rows);
  rmsnorm_backward_gain(dg, dy, x, rstd, rows, dim, x_rows);
}

// QK-norm: x [N, heads, head_dim] (or, with x_stride > 0, each token's heads x_stride elements
// after the previous token's: inside the stacked Q/K/V projection), one gain g[head_dim];
// y [N, heads, head_dim], rstd [N · heads]; dx in x's layout.
template <typename T>
void rmsnorm_heads_forward(T* y, T* rstd, const T* x, const T* g, std::int64_t N, int heads, int head_dim, double eps,
                           std::int64_t x_stride = 0) {
  rmsnorm_forward(y, rstd, x, g, N * heads, head_dim, eps, RowLayout{heads, x_stride});
}

template <typename T>
void rmsnorm_heads_backward(T* dx, T* dg, const T* dy, const T* x, const T* g, const T* rstd, std::int64_t N, int heads,
                            int head_dim, bool accumulate_dx = false, std::int64_t x_stride = 0) {
  rmsnorm_backward(dx, dg, dy, x, g, rstd, N * heads, head_dim, accumulate_dx, RowLayout{heads, x_stride});
}

}  // namespace gc::tree::cpu
