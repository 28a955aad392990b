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
//
// Specialized: the row width d and the scale are compile-time (EmbeddingShape below, or a test's
// own shape S with kDim and kScale); the forward copies rows in packs of up to 16 bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common.cuh"
#include "gc/knob.hpp"

namespace gc::tree::cuda {

// ---- the embedding of this experiment (gcompile folds the spec's values in) ------------------
struct EmbeddingShape {
  static constexpr int kDim = gc::knob<int>("model.d_model", 64);
  static constexpr float kScale = gc::knob<float>("plan.embedding_scale", 1.0f);  // out = scale · E[token]
};

inline constexpr int kEmbeddingThreads = 256;

// One thread per pack of kVec elements of the output (grid-stride); kVec divides d, so a pack
// never straddles two rows.
template <class S, typename T>
__global__ void embedding_forward_kernel(T* out, const std::int32_t* tokens, const T* E, int N) {
  constexpr int kVec = row_pack<T>(S::kDim);
  constexpr int kPacksPerRow = S::kDim / kVec;
  const std::int64_t packs = std::int64_t(N) * kPacksPerRow;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < packs; i += stride) {
    const std::int64_t n = i / kPacksPerRow;
    const int j = int(i - n * kPacksPerRow) * kVec;
    float v[kVec];
    load_pack(v, E + std::int64_t(tokens[n]) * S::kDim + j);
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[e] *= S::kScale;
    store_pack(out + n * S::kDim + j, v);
  }
}

// out [N, S::kDim] = S::kScale · E[tokens]; tokens [N] on the device, each in [0, V).
template <class S, typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* E, int N) {
  if (N <= 0) return;
  constexpr int kVec = row_pack<T>(S::kDim);
  check_pack_aligned<kVec, T>("embedding_forward", out, E);
  launch(embedding_forward_kernel<S, T>, blocks_for(std::int64_t(N) * (S::kDim / kVec), kEmbeddingThreads),
         kEmbeddingThreads, 0, out, tokens, E, N);
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
template <class S, typename T>
__global__ void embedding_backward_kernel(float* dE, const std::int32_t* unique_tokens, const std::int32_t* offsets,
                                          const std::int32_t* positions, const T* dout) {
  const int u = blockIdx.x;
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= S::kDim) return;
  const int begin = offsets[u], end = offsets[u + 1];
  float acc = 0.0f;
  for (int k = begin; k < end; ++k) {  // positions in index order: a fixed summation order
    acc += to_float(dout[std::int64_t(positions[k]) * S::kDim + j]);
  }
  dE[std::int64_t(unique_tokens[u]) * S::kDim + j] += S::kScale * acc;
}

// dE [V, S::kDim] += S::kScale · (scatter of dout by token). unique_tokens/offsets/positions are
// the device copies of an EmbeddingIndex (num_unique = unique_tokens.size()). Accumulates into dE.
template <class S, typename T>
void embedding_backward(float* dE, const std::int32_t* unique_tokens, const std::int32_t* offsets,
                        const std::int32_t* positions, int num_unique, const T* dout) {
  if (num_unique <= 0) return;
  const dim3 grid(unsigned(num_unique), unsigned((S::kDim + kEmbeddingThreads - 1) / kEmbeddingThreads));
  launch(embedding_backward_kernel<S, T>, grid, kEmbeddingThreads, 0, dE, unique_tokens, offsets, positions, dout);
}

}  // namespace gc::tree::cuda
