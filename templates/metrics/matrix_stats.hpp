// Statistics of one weight matrix W[rows, cols] (PyTorch layout: one row per
// output unit), for the condensation analysis of seed 000 §4.7:
//
//   row cosine similarity   C_ij = <w_i, w_j> / (‖w_i‖₂ ‖w_j‖₂)           (seed 000 eq. 6)
//   stable rank             ‖W‖_F² / ‖W‖₂² = Σ σ_i² / σ_max²              (seed 000 eq. 7)
//
// σ_max² is the largest eigenvalue of the Gram matrix WᵀW (or WWᵀ, whichever
// is smaller). Plain power iteration converges like 1/k on random matrices
// (the top of the Marchenko-Pastur spectrum has no gap), which would overstate
// the stable rank at initialization by about 1%; we run the power iteration
// inside a Krylov subspace instead (Lanczos with full reorthogonalization),
// which converges in tens of steps, and stop when the top Ritz value has not
// moved by more than `tol` (relative) over the last 4 steps. All in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/blas.hpp"

namespace gc::tree::metrics {

namespace detail {

inline double dot(const double* a, const double* b, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y = G x for the Gram matrix G = WᵀW (n = cols) or WWᵀ (n = rows), without forming G.
template <typename T>
void gram_times(double* y, const double* x, const T* W, int rows, int cols, bool row_gram, std::vector<double>& tmp) {
  const int inner = row_gram ? cols : rows;
  tmp.assign(std::size_t(inner), 0.0);
  if (row_gram) {
    // tmp = Wᵀx (cols), y = W tmp (rows)
    for (int r = 0; r < rows; ++r) {
      const T* w = W + std::int64_t(r) * cols;
      for (int c = 0; c < cols; ++c) tmp[c] += double(w[c]) * x[r];
    }
#pragma omp parallel for
    for (int r = 0; r < rows; ++r) {
      const T* w = W + std::int64_t(r) * cols;
      double s = 0.0;
      for (int c = 0; c < cols; ++c) s += double(w[c]) * tmp[c];
      y[r] = s;
    }
  } else {
    // tmp = W x (rows), y = Wᵀ tmp (cols)
#pragma omp parallel for
    for (int r = 0; r < rows; ++r) {
      const T* w = W + std::int64_t(r) * cols;
      double s = 0.0;
      for (int c = 0; c < cols; ++c) s += double(w[c]) * x[c];
      tmp[r] = s;
    }
    std::fill(y, y + cols, 0.0);
    for (int r = 0; r < rows; ++r) {
      const T* w = W + std::int64_t(r) * cols;
      for (int c = 0; c < cols; ++c) y[c] += double(w[c]) * tmp[r];
    }
  }
}

// Number of eigenvalues below x of the symmetric tridiagonal matrix with
// diagonal a[0..n) and off-diagonal b[0..n-1) (Sturm sequence, LDLᵀ pivots).
inline int eigenvalues_below(const std::vector<double>& a, const std::vector<double>& b, int n, double x) {
  int count = 0;
  double d = 1.0;
  for (int i = 0; i < n; ++i) {
    const double off = i > 0 ? b[i - 1] * b[i - 1] : 0.0;
    d = a[i] - x - (i > 0 ? off / d : 0.0);
    if (d == 0.0) d = -1e-300;
    if (d < 0.0) ++count;
  }
  return count;
}

// Largest eigenvalue of that tridiagonal matrix, by bisection inside the Gershgorin bounds.
inline double largest_tridiagonal_eigenvalue(const std::vector<double>& a, const std::vector<double>& b, int n) {
  double lo = a[0], hi = a[0];
  for (int i = 0; i < n; ++i) {
    const double r = (i > 0 ? std::fabs(b[i - 1]) : 0.0) + (i + 1 < n ? std::fabs(b[i]) : 0.0);
    lo = std::min(lo, a[i] - r);
    hi = std::max(hi, a[i] + r);
  }
  for (int it = 0; it < 200 && hi - lo > 1e-15 * std::max(std::fabs(hi), 1e-300); ++it) {
    const double mid = 0.5 * (lo + hi);
    if (eigenvalues_below(a, b, n, mid) == n) {
      hi = mid;  // every eigenvalue is below mid
    } else {
      lo = mid;
    }
  }
  return hi;
}

// Deterministic start vector with no special direction (splitmix64 hash).
inline void start_vector(std::vector<double>& v) {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (auto& x : v) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x = double(z >> 11) / double(1ull << 53) - 0.5;
  }
  const double norm = std::sqrt(dot(v.data(), v.data(), std::int64_t(v.size())));
  for (auto& x : v) x /= norm;
}

}  // namespace detail

struct SpectralNorm {
  double sigma_max = 0.0;
  int iterations = 0;
  bool converged = false;
};

// The Lanczos iteration of spectral_norm (see the header comment) over the vectors of an Ops
// object, which holds the Gram operator: HostLanczos below on the host, cuda/weight_stats.cuh's
// on the device (both backends run this loop; only the vector operations differ).
//   ops.begin()             q = the start vector (detail::start_vector), the basis empty
//   ops.extend_basis()      appends q to the basis
//   ops.apply()             w = G q; returns q·w
//   ops.reorthogonalize()   removes w's components along the basis, twice (Kahan-Parlett)
//   ops.norm_w()            ‖w‖₂
//   ops.advance(norm)       q = w / norm
template <typename Ops>
SpectralNorm lanczos_spectral_norm(Ops& ops, int n, double tol, int max_steps) {
  SpectralNorm out;
  if (n <= 0) return out;
  const int steps = std::min(max_steps, n);
  std::vector<double> alpha, beta, history;
  ops.begin();
  for (int j = 0; j < steps; ++j) {
    ops.extend_basis();
    alpha.push_back(ops.apply());
    ops.reorthogonalize();
    const double next = ops.norm_w();
    const double theta = detail::largest_tridiagonal_eigenvalue(alpha, beta, int(alpha.size()));
    history.push_back(theta);
    out.iterations = j + 1;
    out.sigma_max = std::sqrt(std::max(theta, 0.0));
    const bool invariant = next <= 1e-14 * std::max(std::fabs(theta), 1e-300);
    const bool settled = history.size() > 4 && std::fabs(theta - history[history.size() - 5]) <= tol * std::fabs(theta);
    if (invariant || settled || j + 1 == n) {
      out.converged = true;
      break;
    }
    beta.push_back(next);
    ops.advance(next);
  }
  return out;
}

// The Gram operator of W[rows, cols] in host memory, for lanczos_spectral_norm: the smaller of
// WᵀW and WWᵀ, never formed; modified Gram-Schmidt against the basis.
template <typename T>
class HostLanczos {
 public:
  HostLanczos(const T* W, int rows, int cols)
      : W_(W), rows_(rows), cols_(cols), row_gram_(rows < cols), n_(row_gram_ ? rows : cols),
        q_(std::size_t(n_)), w_(std::size_t(n_)) {}
  int size() const { return n_; }
  void begin() { detail::start_vector(q_); }
  void extend_basis() { basis_.push_back(q_); }
  double apply() {
    detail::gram_times(w_.data(), q_.data(), W_, rows_, cols_, row_gram_, tmp_);
    return detail::dot(q_.data(), w_.data(), n_);
  }
  void reorthogonalize() {
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& b : basis_) {
        const double c = detail::dot(b.data(), w_.data(), n_);
        for (int i = 0; i < n_; ++i) w_[i] -= c * b[i];
      }
    }
  }
  double norm_w() const { return std::sqrt(detail::dot(w_.data(), w_.data(), n_)); }
  void advance(double norm) {
    for (int i = 0; i < n_; ++i) q_[i] = w_[i] / norm;
  }

 private:
  const T* W_;
  int rows_, cols_;
  bool row_gram_;
  int n_;
  std::vector<std::vector<double>> basis_;
  std::vector<double> q_, w_, tmp_;
};

// ‖W‖₂ by Lanczos on the smaller Gram matrix (see the header comment).
template <typename T>
SpectralNorm spectral_norm(const T* W, int rows, int cols, double tol = 1e-10, int max_steps = 300) {
  HostLanczos<T> ops(W, rows, cols);
  return lanczos_spectral_norm(ops, ops.size(), tol, max_steps);
}

template <typename T>
double frobenius_squared(const T* W, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += double(W[i]) * double(W[i]);
  return s;
}

struct StableRank {
  double value = 0.0;  // ‖W‖_F² / σ_max² (0 for an all-zero matrix)
  double sigma_max = 0.0;
  int iterations = 0;
  bool converged = false;
};

// Seed 000 eq. 7 from the spectral norm and ‖W‖_F².
inline StableRank stable_rank_of(const SpectralNorm& s, double frobenius_sq) {
  StableRank out;
  out.sigma_max = s.sigma_max;
  out.iterations = s.iterations;
  out.converged = s.converged;
  out.value = s.sigma_max > 0.0 ? frobenius_sq / (s.sigma_max * s.sigma_max) : 0.0;
  return out;
}

template <typename T>
StableRank stable_rank(const T* W, int rows, int cols) {
  return stable_rank_of(spectral_norm(W, rows, cols), frobenius_squared(W, std::int64_t(rows) * cols));
}

struct CosineStats {
  double mean_abs = 0.0;  // mean |C_ij| over i ≠ j
  double mean = 0.0;      // mean C_ij over i ≠ j
  double max_abs = 0.0;   // max |C_ij| over i ≠ j
  int rows_used = 0;      // rows measured (evenly spaced when the matrix has more than max_rows)
};

// The rows a cosine matrix of at most max_rows rows uses: all, or evenly spaced ones.
inline std::vector<int> cosine_rows(int rows, int max_rows) {
  const int used = std::min(rows, max_rows);
  std::vector<int> out(std::size_t(std::max(used, 0)));
  for (int i = 0; i < used; ++i) out[i] = int(std::int64_t(i) * rows / used);
  return out;
}

// Seed 000 eq. 6 over the chosen rows of W. A zero row has cosine 0 with every
// other row. When `matrix` is given it receives the full [k, k] matrix C
// (k = rows.size()). The Gram matrix is formed in row blocks by BLAS.
template <typename T>
CosineStats row_cosine_stats(const T* W, int cols, const std::vector<int>& rows, std::vector<float>* matrix = nullptr) {
  const int k = int(rows.size());
  CosineStats out;
  out.rows_used = k;
  if (k < 2) return out;
  std::vector<float> unit(std::size_t(k) * cols);
  for (int i = 0; i < k; ++i) {
    const T* w = W + std::int64_t(rows[i]) * cols;
    const double norm = std::sqrt(frobenius_squared(w, cols));
    const double inv = norm > 0.0 ? 1.0 / norm : 0.0;
    for (int c = 0; c < cols; ++c) unit[std::size_t(i) * cols + c] = float(double(w[c]) * inv);
  }
  if (matrix) matrix->assign(std::size_t(k) * k, 0.0f);
  constexpr int kBlock = 256;
  std::vector<float> block(std::size_t(kBlock) * k);
  double sum = 0.0, sum_abs = 0.0, max_abs = 0.0;
  for (int r0 = 0; r0 < k; r0 += kBlock) {
    const int nb = std::min(kBlock, k - r0);
    core::blas::gemm(false, true, nb, k, cols, 1.0f, unit.data() + std::size_t(r0) * cols, cols, unit.data(), cols,
                    0.0f, block.data(), k);
    for (int i = 0; i < nb; ++i) {
      for (int j = 0; j < k; ++j) {
        const double c = std::clamp(double(block[std::size_t(i) * k + j]), -1.0, 1.0);
        if (matrix) (*matrix)[std::size_t(r0 + i) * k + j] = float(r0 + i == j ? 1.0 : c);
        if (r0 + i == j) continue;
        sum += c;
        sum_abs += std::fabs(c);
        max_abs = std::max(max_abs, std::fabs(c));
      }
    }
  }
  const double pairs = double(k) * double(k - 1);
  out.mean = sum / pairs;
  out.mean_abs = sum_abs / pairs;
  out.max_abs = max_abs;
  return out;
}

}  // namespace gc::tree::metrics
