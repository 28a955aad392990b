// The words both backends and the model share: one enum per spec key whose
// value is a choice (the knobs of config.hpp and of the kernel files fold the
// spec's value into these), the attention's shape, and the RoPE table every
// backend computes on the host. Backend-neutral: the CPU and CUDA kernels,
// the model and the engines include it; it includes nothing of theirs.
#pragma once

#include <cmath>
#include <cstdint>

namespace gc::tree {

// ---- one enum per spec key ----------------------------------------------------------------
enum class NormPlacement { pre, sandwich };                // model.norm_placement
enum class GatedAttention { none, headwise, elementwise }; // model.gated_attention
enum class Precision { bf16, fp32 };                       // train.precision
enum class Decay { cosine, linear, constant };             // schedule.decay
enum class RouterScoring { softmax, sigmoid };             // plan.moe_router_scoring (moe.router_scoring)
enum class LoadBalance { none, aux_loss, aux_free };       // plan.moe_load_balance (moe.load_balance)

// ---- the attention's shape (cpu/attention.hpp's layouts; the CUDA kernels take the same) ----
struct AttentionDims {
  int batch;
  int seq_len;
  int heads;
  int kv_heads;
  int head_dim;

  int group() const { return heads / kv_heads; }
  std::int64_t q_offset(int b, int t, int h) const { return ((std::int64_t(b) * seq_len + t) * heads + h) * head_dim; }
  std::int64_t kv_offset(int b, int t, int g) const {
    return ((std::int64_t(b) * seq_len + t) * kv_heads + g) * head_dim;
  }
  std::int64_t lse_index(int b, int h, int t) const { return (std::int64_t(b) * heads + h) * seq_len + t; }

  // Query row r of the [batch, heads, seq_len] order: batch, head, position, and the kv head it reads.
  struct QueryRow {
    int b, h, i, g;
  };
  QueryRow query_row(std::int64_t r) const {
    const int h = int((r / seq_len) % heads);
    return {int(r / (std::int64_t(seq_len) * heads)), h, int(r % seq_len), h / group()};
  }
};

// ---- rotary position embedding: the table (cpu/rope.hpp's convention) ---------------------
// cos_table/sin_table: [T, hd/2].
template <typename T>
void rope_table(T* cos_table, T* sin_table, int seq_len, int head_dim, double theta_base) {
  const int half = head_dim / 2;
  for (int p = 0; p < seq_len; ++p) {
    for (int i = 0; i < half; ++i) {
      const double inv_freq = std::pow(theta_base, -2.0 * i / head_dim);
      const double angle = double(p) * inv_freq;
      cos_table[std::int64_t(p) * half + i] = T(std::cos(angle));
      sin_table[std::int64_t(p) * half + i] = T(std::sin(angle));
    }
  }
}

}  // namespace gc::tree
