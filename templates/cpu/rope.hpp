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

#include <cmath>
#include <cstdint>

namespace gcm::cpu {

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

// Rotates every head vector by +angle (direction = +1) or −angle (direction = −1).
template <typename T>
void rope_rotate(T* out, const T* in, const T* cos_table, const T* sin_table, int B, int seq_len, int heads,
                 int head_dim, int direction) {
  const int half = head_dim / 2;
  const std::int64_t rows = std::int64_t(B) * seq_len;
#pragma omp parallel for
  for (std::int64_t bt = 0; bt < rows; ++bt) {
    const std::int64_t p = bt % seq_len;
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

}  // namespace gcm::cpu
