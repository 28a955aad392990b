// Rotary position embedding (Su et al. 2021) with Hugging Face's rotate_half pairing: within a
// head vector of even size hd, dimension i (< hd/2) is rotated together with i + hd/2:
//
//   θ_i = base^(−2i/hd),   angle(p, i) = p · θ_i,   positions p = 0 .. T−1
//   forward   y_i        = x_i · cos − x_{i+hd/2} · sin
//             y_{i+hd/2} = x_{i+hd/2} · cos + x_i · sin
//   backward  the transpose of a rotation is the rotation by −angle:
//             dx_i        = dy_i · cos + dy_{i+hd/2} · sin
//             dx_{i+hd/2} = dy_{i+hd/2} · cos − dy_i · sin
//
// Layout: x [B, T, heads, hd] (q with heads = H, k with heads = KV); the table is cos/sin
// [T, hd/2]. The angles are computed in double (HF computes them in fp32, which differs by up
// to ~T·2^-24 rad at large positions). in == out is allowed (each pair is read before written).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "vocabulary.hpp"

namespace gc::tree::cpu {

// Rotates every head vector by +angle (direction = +1) or −angle (direction = −1); the rows
// [B, seq_len] hold positions first_position + (row mod seq_len).
template <typename T>
void rope_rotate(T* out, const T* in, const T* cos_table, const T* sin_table, int B, int seq_len, int heads,
                 int head_dim, int direction, std::int64_t first_position = 0) {
  const int half = head_dim / 2;
  const std::int64_t rows = std::int64_t(B) * seq_len;
#pragma omp parallel for if (rows > 1)
  for (std::int64_t bt = 0; bt < rows; ++bt) {
    const std::int64_t p = first_position + bt % seq_len;
    const T* c = cos_table + p * half;
    const T* s = sin_table + p * half;
    for (int h = 0; h < heads; ++h) {
      const std::int64_t base = (bt * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const T x1 = in[base + i];
        const T x2 = in[base + i + half];
        const T sn = direction > 0 ? s[i] : -s[i];
        out[base + i] = x1 * c[i] - x2 * sn;
        out[base + i + half] = x2 * c[i] + x1 * sn;
      }
    }
  }
}

template <typename T>
void rope_forward(T* out, const T* x, const T* cos_table, const T* sin_table, int B, int seq_len, int heads,
                  int head_dim) {
  rope_rotate(out, x, cos_table, sin_table, B, seq_len, heads, head_dim, +1);
}

// dx = R(−angle) · dy (dx may alias dy).
template <typename T>
void rope_backward(T* dx, const T* dy, const T* cos_table, const T* sin_table, int B, int seq_len, int heads,
                   int head_dim) {
  rope_rotate(dx, dy, cos_table, sin_table, B, seq_len, heads, head_dim, -1);
}

// The Q, K and V projections as one GEMM (model_impl.hpp, detail::kQkvStacked) write each
// token's row of the stacked output as heads + 2·kv_heads head vectors: q's heads, then k's,
// then v's. qkv_rope_forward splits it into RoPE(q) [B, T, heads, hd], RoPE(k) and v
// [B, T, kv_heads, hd]; qkv_rope_backward stacks the gradients back: R(−angle)·dqr, R(−angle)·dkr
// and dv. (The split costs nothing beyond separate RoPE passes but the copy of v.) The QK-norm
// path normalizes q and k inside the rows (cpu/rmsnorm.hpp) and moves only v: qkv_v_forward and
// qkv_v_backward.

// Elements of one token: q's heads, k's (and v's) heads, a stacked row, and where v starts in it.
struct QkvWidths {
  QkvWidths(int heads, int kv_heads, int head_dim)
      : q(std::int64_t(heads) * head_dim), kv(std::int64_t(kv_heads) * head_dim), row(q + 2 * kv), v(q + kv) {}
  std::int64_t q, kv, row, v;
};

// dst row r [0, width) = src row r [0, width), each array with its own row stride.
template <typename T>
void copy_rows(T* dst, std::int64_t dst_stride, const T* src, std::int64_t src_stride, std::int64_t width,
               std::int64_t rows) {
#pragma omp parallel for
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * src_stride, src + r * src_stride + width, dst + r * dst_stride);
  }
}

template <typename T>
void qkv_rope_forward(T* qr, T* kr, T* v, const T* qkv, const T* cos_table, const T* sin_table, int B, int seq_len,
                      int heads, int kv_heads, int head_dim) {
  const std::int64_t rows = std::int64_t(B) * seq_len;
  const QkvWidths w(heads, kv_heads, head_dim);
#pragma omp parallel for
  for (std::int64_t bt = 0; bt < rows; ++bt) {
    const T* row = qkv + bt * w.row;
    rope_rotate(qr + bt * w.q, row, cos_table, sin_table, 1, 1, heads, head_dim, +1, bt % seq_len);
    rope_rotate(kr + bt * w.kv, row + w.q, cos_table, sin_table, 1, 1, kv_heads, head_dim, +1, bt % seq_len);
  }
  copy_rows(v, w.kv, qkv + w.v, w.row, w.kv, rows);
}

template <typename T>
void qkv_rope_backward(T* dqkv, const T* dqr, const T* dkr, const T* dv, const T* cos_table, const T* sin_table,
                       int B, int seq_len, int heads, int kv_heads, int head_dim) {
  const std::int64_t rows = std::int64_t(B) * seq_len;
  const QkvWidths w(heads, kv_heads, head_dim);
#pragma omp parallel for
  for (std::int64_t bt = 0; bt < rows; ++bt) {
    T* row = dqkv + bt * w.row;
    rope_rotate(row, dqr + bt * w.q, cos_table, sin_table, 1, 1, heads, head_dim, -1, bt % seq_len);
    rope_rotate(row + w.q, dkr + bt * w.kv, cos_table, sin_table, 1, 1, kv_heads, head_dim, -1, bt % seq_len);
  }
  copy_rows(dqkv + w.v, w.row, dv, w.kv, w.kv, rows);
}

// v = the v heads of each stacked row, and those heads of dqkv = dv.
template <typename T>
void qkv_v_forward(T* v, const T* qkv, std::int64_t rows, int heads, int kv_heads, int head_dim) {
  const QkvWidths w(heads, kv_heads, head_dim);
  copy_rows(v, w.kv, qkv + w.v, w.row, w.kv, rows);
}

template <typename T>
void qkv_v_backward(T* dqkv, const T* dv, std::int64_t rows, int heads, int kv_heads, int head_dim) {
  const QkvWidths w(heads, kv_heads, head_dim);
  copy_rows(dqkv + w.v, w.row, dv, w.kv, w.kv, rows);
}

}  // namespace gc::tree::cpu
