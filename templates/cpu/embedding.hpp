// Token embedding lookup with a forward multiplier (e.g. Spike No More's √d, or μP's α_emb).
//
//   forward   out[n,:] = scale · E[tokens[n], :]                  out [N,d], E [V,d]
//   backward  dE[tokens[n], :] += scale · dout[n, :]              (parameter grads accumulate)
//
// Determinism: the backward pass splits the d columns into fixed blocks; one thread owns a
// block and visits the tokens in order, so every dE element receives its additions in the same
// order whatever the thread count, and no two threads ever write the same element.
#pragma once

#include <cstdint>

namespace gc::tree::cpu {

inline constexpr int kEmbeddingColumnBlock = 64;

template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* E, int N, int d, T scale) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const T* row = E + std::int64_t(tokens[n]) * d;
    T* dst = out + std::int64_t(n) * d;
    for (int j = 0; j < d; ++j) {
      dst[j] = scale * row[j];
    }
  }
}

template <typename T>
void embedding_backward(T* dE, const std::int32_t* tokens, const T* dout, int N, int d, T scale) {
  const int blocks = (d + kEmbeddingColumnBlock - 1) / kEmbeddingColumnBlock;
#pragma omp parallel for
  for (int blk = 0; blk < blocks; ++blk) {
    const int j0 = blk * kEmbeddingColumnBlock;
    const int j1 = j0 + kEmbeddingColumnBlock < d ? j0 + kEmbeddingColumnBlock : d;
    for (int n = 0; n < N; ++n) {
      T* row = dE + std::int64_t(tokens[n]) * d;
      const T* src = dout + std::int64_t(n) * d;
      for (int j = j0; j < j1; ++j) {
        row[j] += scale * src[j];
      }
    }
  }
}

}  // namespace gc::tree::cpu
