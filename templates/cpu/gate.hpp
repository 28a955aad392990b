// Gated attention (seed 000 eq. 3-4, Qiu et al.): each head's SDPA output is multiplied by a
// sigmoid gate computed from the pre-attention normalized input, before W_O.
//
//   z = x · W_g (computed by linear_forward),  g = σ(z)
//   headwise     z [N, H]       out[n,h,c] = σ(z[n,h]) · attn[n,h,c]   (broadcast over hd)
//   elementwise  z [N, H·hd]    out[n,e]   = σ(z[n,e]) · attn[n,e]
//   backward     d attn = σ(z) ⊙ dout
//                dz     = σ(z)(1 − σ(z)) · (dout ⊙ attn)   (headwise: summed over the head's hd)
//
// N = B·T rows; attn and out are [N, H, hd]. The mode is a template parameter so a specialized
// tree keeps only the branch it uses.
#pragma once

#include <cmath>
#include <cstdint>

#include "exp.hpp"
#include "vocabulary.hpp"

namespace gc::tree::cpu {

inline double sigmoid(double z) { return 1.0 / (1.0 + exp_fixed(-z)); }

template <GatedAttention kMode, typename T>
void gate_forward(T* out, const T* attn, const T* z, std::int64_t N, int heads, int head_dim) {
#pragma omp parallel for
  for (std::int64_t n = 0; n < N; ++n) {
    for (int h = 0; h < heads; ++h) {
      const std::int64_t head = n * heads + h;
      const std::int64_t base = head * head_dim;
      if constexpr (kMode == GatedAttention::headwise) {
        const double gate = sigmoid(double(z[head]));
        for (int c = 0; c < head_dim; ++c) {
          out[base + c] = T(gate * double(attn[base + c]));
        }
      } else {
        for (int c = 0; c < head_dim; ++c) {
          out[base + c] = T(sigmoid(double(z[base + c])) * double(attn[base + c]));
        }
      }
    }
  }
}

// dattn and dz are overwritten. dattn may alias dout.
template <GatedAttention kMode, typename T>
void gate_backward(T* dattn, T* dz, const T* dout, const T* attn, const T* z, std::int64_t N, int heads, int head_dim) {
#pragma omp parallel for
  for (std::int64_t n = 0; n < N; ++n) {
    for (int h = 0; h < heads; ++h) {
      const std::int64_t head = n * heads + h;
      const std::int64_t base = head * head_dim;
      if constexpr (kMode == GatedAttention::headwise) {
        const double gate = sigmoid(double(z[head]));
        double dgate = 0.0;  // Σ_c dout ⊙ attn
        for (int c = 0; c < head_dim; ++c) {
          dgate += double(dout[base + c]) * double(attn[base + c]);
          dattn[base + c] = T(gate * double(dout[base + c]));
        }
        dz[head] = T(gate * (1.0 - gate) * dgate);
      } else {
        for (int c = 0; c < head_dim; ++c) {
          const double gate = sigmoid(double(z[base + c]));
          const double grad_out = double(dout[base + c]);
          dz[base + c] = T(gate * (1.0 - gate) * grad_out * double(attn[base + c]));
          dattn[base + c] = T(gate * grad_out);
        }
      }
    }
  }
}

}  // namespace gc::tree::cpu
