// Token embedding lookup on the GPU, the semantics of templates/cpu/embedding.hpp:
//
//   forward   out[n,:] = scale · E[tokens[n], :]                             out [N,d] T, E [V,d] T
//   backward  dE[tok,:] += scale · Σ_{p : tokens[p] = tok} dout[p,:]          dE [V,d] fp32, dout [N,d] T
//
// Determinism without atomics: the host builds an inverse index of the batch's tokens
// (build_embedding_index): every distinct token with the positions where it occurs, in
// increasing order. The backward gives each distinct token its own blocks (one per chunk of
// columns); one thread owns one column of that token's dE row and adds the positions in index
// order, so every dE element receives its additions in the same order on every run, and no two
// threads ever write the same element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common.cuh"

namespace gcm::cuda {

inline constexpr int kEmbeddingThreads = 256;

// One thread per output element (grid-stride).
template <typename T>
__global__ void embedding_forward_kernel(T* out, const std::int32_t* tokens, const T* E, int N, int d, float scale) {
  const std::int64_t total = std::int64_t(N) * d;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::int64_t n = i / d;
    const std::int64_t j = i - n * d;
    out[i] = from_float<T>(scale * to_float(E[std::int64_t(tokens[n]) * d + j]));
  }
}

// out [N,d] = scale · E[tokens]; tokens [N] on the device, each in [0, V).
template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* E, int N, int d, float scale) {
  const std::int64_t total = std::int64_t(N) * d;
  if (total <= 0) return;
  launch(embedding_forward_kernel<T>, blocks_for(total, kEmbeddingThreads), kEmbeddingThreads, 0, out, tokens, E, N, d,
         scale);
}

// Inverse index of one batch of tokens, built on the host:
//   unique_tokens [U]     the distinct tokens, ascending
//   offsets       [U+1]   token u occurs at positions[offsets[u] .. offsets[u+1])
//   positions     [N]     grouped by token, increasing within each group
struct EmbeddingIndex {
  std::vector<std::int32_t> unique_tokens, offsets, positions;
};

inline EmbeddingIndex build_embedding_index(const std::int32_t* host_tokens, int N) {
  EmbeddingIndex index;
  index.positions.resize(N < 0 ? 0 : std::size_t(N));
  for (int p = 0; p < N; ++p) index.positions[std::size_t(p)] = p;
  // Stable: equal tokens keep their positions in increasing order.
  std::stable_sort(index.positions.begin(), index.positions.end(),
                   [host_tokens](std::int32_t a, std::int32_t b) { return host_tokens[a] < host_tokens[b]; });
  for (int k = 0; k < N; ++k) {
    const std::int32_t token = host_tokens[index.positions[std::size_t(k)]];
    if (k == 0 || token != index.unique_tokens.back()) {
      index.unique_tokens.push_back(token);
      index.offsets.push_back(k);
    }
  }
  index.offsets.push_back(N < 0 ? 0 : N);
  return index;
}

// Block (u, chunk): thread t owns column j = chunk·blockDim + t of distinct token u's row.
template <typename T>
__global__ void embedding_backward_kernel(float* dE, const std::int32_t* unique_tokens, const std::int32_t* offsets,
                                          const std::int32_t* positions, const T* dout, int d, float scale) {
  const int u = blockIdx.x;
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const int begin = offsets[u], end = offsets[u + 1];
  float acc = 0.0f;
  for (int k = begin; k < end; ++k) {  // positions in index order: a fixed summation order
    acc += to_float(dout[std::int64_t(positions[k]) * d + j]);
  }
  dE[std::int64_t(unique_tokens[u]) * d + j] += scale * acc;
}

// dE [V,d] += scale · (scatter of dout by token). unique_tokens/offsets/positions are the
// device copies of an EmbeddingIndex (num_unique = unique_tokens.size()). Accumulates into dE.
template <typename T>
void embedding_backward(float* dE, const std::int32_t* unique_tokens, const std::int32_t* offsets,
                        const std::int32_t* positions, int num_unique, const T* dout, int d, float scale) {
  if (num_unique <= 0 || d <= 0) return;
  const dim3 grid(unsigned(num_unique), unsigned((d + kEmbeddingThreads - 1) / kEmbeddingThreads));
  launch(embedding_backward_kernel<T>, grid, kEmbeddingThreads, 0, dE, unique_tokens, offsets, positions, dout, d,
         scale);
}

}  // namespace gcm::cuda
