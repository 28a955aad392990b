#include "cpu/attention.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::AttentionDims;
using gc::tree::cpu::attention_backward;
using gc::tree::cpu::attention_forward;

// Naive causal GQA attention in double: the full masked probability matrix P [B,H,T,T].
struct Reference {
  std::vector<double> out, lse, P;
};

Reference reference_attention(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                              const AttentionDims& d, double scale) {
  const int T = d.seq_len, hd = d.head_dim;
  Reference ref{std::vector<double>(q.size(), 0.0), std::vector<double>(std::size_t(d.batch) * d.heads * T),
                std::vector<double>(std::size_t(d.batch) * d.heads * T * T, 0.0)};
  for (int b = 0; b < d.batch; ++b) {
    for (int h = 0; h < d.heads; ++h) {
      const int g = h * d.kv_heads / d.heads;
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(T, -INFINITY);
        for (int j = 0; j <= i; ++j) {
          s[j] = 0.0;
          for (int c = 0; c < hd; ++c) {
            s[j] += q[d.q_offset(b, i, h) + c] * k[d.kv_offset(b, j, g) + c] * scale;
          }
        }
        double sum = 0.0;
        for (int j = 0; j < T; ++j) {
          sum += std::exp(s[j]);
        }
        ref.lse[d.lse_index(b, h, i)] = std::log(sum);
        for (int j = 0; j < T; ++j) {
          const double p = std::exp(s[j]) / sum;
          ref.P[(d.lse_index(b, h, i)) * T + j] = p;
          for (int c = 0; c < hd; ++c) {
            ref.out[d.q_offset(b, i, h) + c] += p * v[d.kv_offset(b, j, g) + c];
          }
        }
      }
    }
  }
  return ref;
}

struct Inputs {
  AttentionDims d;
  std::vector<double> q, k, v;
  Inputs(AttentionDims dims, unsigned seed, double amplitude = 1.0) : d(dims) {
    const std::size_t nq = std::size_t(d.batch) * d.seq_len * d.heads * d.head_dim;
    const std::size_t nkv = std::size_t(d.batch) * d.seq_len * d.kv_heads * d.head_dim;
    q = kt::random_vector(nq, seed, 0.1 * amplitude, amplitude);
    k = kt::random_vector(nkv, seed + 1, 0.1 * amplitude, amplitude);
    v = kt::random_vector(nkv, seed + 2);
  }
};

const AttentionDims kGqa{2, 7, 4, 2, 6};

TEST(KernelAttention, ForwardFloatMatchesNaiveReference) {
  for (const AttentionDims& dims :
       {kGqa, AttentionDims{1, 9, 3, 3, 4}, AttentionDims{2, 5, 4, 1, 8}, AttentionDims{1, 128, 4, 2, 32}}) {
    // amplitude 2 gives peaked rows (|s| up to ~10) so the max subtraction matters
    const Inputs in(dims, 100 + dims.kv_heads, 2.0);
    const double scale = gc::tree::cpu::default_attention_scale(dims.head_dim);
    const Reference ref = reference_attention(in.q, in.k, in.v, dims, scale);
    const auto qf = kt::cast<float>(in.q), kf = kt::cast<float>(in.k), vf = kt::cast<float>(in.v);
    std::vector<float> out(in.q.size()), lse(ref.lse.size());
    attention_forward(out.data(), lse.data(), qf.data(), kf.data(), vf.data(), dims, scale);
    const double err_out = kt::rel_error(out, ref.out), err_lse = kt::rel_error(lse, ref.lse);
    const std::string tag = " T=" + std::to_string(dims.seq_len) + " H=" + std::to_string(dims.heads) +
                            " KV=" + std::to_string(dims.kv_heads);
    kt::report("attention forward fp32 out" + tag, err_out);
    kt::report("attention forward fp32 lse" + tag, err_lse);
    EXPECT_LT(err_out, kt::kForwardTol);
    EXPECT_LT(err_lse, kt::kForwardTol);
  }
}

TEST(KernelAttention, BackwardMatchesFiniteDifferencesWithGqa) {
  for (const AttentionDims& dims : {kGqa, AttentionDims{1, 6, 2, 1, 5}}) {
    Inputs in(dims, 200 + dims.heads);
    const double scale = 0.37;  // non-default scale
    const auto r = kt::random_vector(in.q.size(), 7);
    std::vector<double> out(in.q.size()), lse(std::size_t(dims.batch) * dims.heads * dims.seq_len);
    auto loss = [&] {
      attention_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), dims, scale);
      return kt::dot(r, out);
    };
    loss();
    std::vector<double> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
    attention_backward(dq.data(), dk.data(), dv.data(), r.data(), out.data(), lse.data(), in.q.data(), in.k.data(),
                       in.v.data(), dims, scale);
    const double err_q = kt::rel_error(dq, kt::numeric_grad(in.q, loss));
    const double err_k = kt::rel_error(dk, kt::numeric_grad(in.k, loss));
    const double err_v = kt::rel_error(dv, kt::numeric_grad(in.v, loss));
    const std::string tag = " H=" + std::to_string(dims.heads) + " KV=" + std::to_string(dims.kv_heads);
    kt::report("attention backward dq vs FD" + tag, err_q);
    kt::report("attention backward dk vs FD" + tag, err_k);
    kt::report("attention backward dv vs FD" + tag, err_v);
    EXPECT_LT(err_q, kt::kGradTol);
    EXPECT_LT(err_k, kt::kGradTol);
    EXPECT_LT(err_v, kt::kGradTol);
  }
}

// The fp32 backward (the oracle for a CUDA backward) agrees with the float64 backward.
TEST(KernelAttention, BackwardFloatMatchesDoubleBackward) {
  const AttentionDims d{2, 31, 4, 2, 16};
  const Inputs in(d, 250, 1.5);
  const double scale = gc::tree::cpu::default_attention_scale(d.head_dim);
  const auto dout = kt::random_vector(in.q.size(), 8);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto q = kt::cast<T>(in.q), k = kt::cast<T>(in.k), v = kt::cast<T>(in.v), dy = kt::cast<T>(dout);
    std::vector<T> out(q.size()), lse(std::size_t(d.batch) * d.heads * d.seq_len);
    std::vector<T> dq(q.size()), dk(k.size()), dv(v.size());
    attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), d, scale);
    attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), out.data(), lse.data(), q.data(), k.data(), v.data(),
                       d, scale);
    return std::vector<std::vector<T>>{dq, dk, dv};
  };
  const auto ref = run(0.0);
  const auto got = run(0.0f);
  const char* names[] = {"attention backward fp32 dq vs fp64", "attention backward fp32 dk vs fp64",
                         "attention backward fp32 dv vs fp64"};
  for (int i = 0; i < 3; ++i) {
    const double err = kt::rel_error(got[i], ref[i]);
    kt::report(names[i], err);
    EXPECT_LT(err, kt::kForwardTol);
  }
}

TEST(KernelAttention, SinkScoreAndEntropyMatchNaiveProbabilities) {
  const AttentionDims d = kGqa;
  const Inputs in(d, 300, 1.5);
  const double scale = gc::tree::cpu::default_attention_scale(d.head_dim);
  const Reference ref = reference_attention(in.q, in.k, in.v, d, scale);
  const auto qf = kt::cast<float>(in.q), kf = kt::cast<float>(in.k), vf = kt::cast<float>(in.v);
  std::vector<float> out(in.q.size()), lse(ref.lse.size());
  attention_forward(out.data(), lse.data(), qf.data(), kf.data(), vf.data(), d, scale);
  std::vector<double> sink(d.heads), entropy(d.heads);
  gc::tree::cpu::sink_score(sink.data(), qf.data(), kf.data(), lse.data(), d, scale);
  gc::tree::cpu::attention_entropy(entropy.data(), qf.data(), kf.data(), lse.data(), d, scale);

  std::vector<double> ref_sink(d.heads, 0.0), ref_entropy(d.heads, 0.0);
  const int T = d.seq_len;
  for (int b = 0; b < d.batch; ++b) {
    for (int h = 0; h < d.heads; ++h) {
      for (int i = 0; i < T; ++i) {
        const double* row = &ref.P[d.lse_index(b, h, i) * T];
        ref_sink[h] += row[0] / (d.batch * T);  // seed 000 eq. 5: A(i, 1) is key 0
        for (int j = 0; j <= i; ++j) {
          ref_entropy[h] -= row[j] * std::log(row[j]) / (d.batch * T);
        }
      }
    }
  }
  const double err_sink = kt::rel_error(sink, ref_sink), err_entropy = kt::rel_error(entropy, ref_entropy);
  kt::report("sink score (fp32 inputs) vs naive", err_sink);
  kt::report("attention entropy (fp32 inputs) vs naive", err_entropy);
  EXPECT_LT(err_sink, kt::kForwardTol);
  EXPECT_LT(err_entropy, kt::kForwardTol);
  for (int h = 0; h < d.heads; ++h) {
    EXPECT_GT(sink[h], 1.0 / T);  // query 0 alone contributes 1/T
    EXPECT_LE(sink[h], 1.0);
  }
}

TEST(KernelAttention, UniformScoresGiveHarmonicSinkScore) {
  // q = 0: every causal row is uniform, so S = (1/T) Σ_i 1/(i+1) and entropy = mean log(i+1).
  const AttentionDims d{1, 7, 2, 1, 4};
  std::vector<double> q(std::size_t(d.seq_len) * d.heads * d.head_dim, 0.0);
  const auto k = kt::random_vector(std::size_t(d.seq_len) * d.head_dim, 5);
  std::vector<double> out(q.size()), lse(std::size_t(d.heads) * d.seq_len), sink(d.heads), entropy(d.heads);
  attention_forward(out.data(), lse.data(), q.data(), k.data(), k.data(), d, 1.0);
  gc::tree::cpu::sink_score(sink.data(), q.data(), k.data(), lse.data(), d, 1.0);
  gc::tree::cpu::attention_entropy(entropy.data(), q.data(), k.data(), lse.data(), d, 1.0);
  double harmonic = 0.0, mean_log = 0.0;
  for (int i = 0; i < d.seq_len; ++i) {
    harmonic += 1.0 / (i + 1) / d.seq_len;
    mean_log += std::log(i + 1.0) / d.seq_len;
  }
  for (int h = 0; h < d.heads; ++h) {
    EXPECT_NEAR(sink[h], harmonic, 1e-14);
    EXPECT_NEAR(entropy[h], mean_log, 1e-14);
  }
}

TEST(KernelAttention, ResultsAreIndependentOfThreadCount) {
  const AttentionDims d{2, 33, 4, 2, 16};
  const Inputs in(d, 400);
  const auto qf = kt::cast<float>(in.q), kf = kt::cast<float>(in.k), vf = kt::cast<float>(in.v);
  const auto dout = kt::cast<float>(kt::random_vector(in.q.size(), 9));
  const double scale = gc::tree::cpu::default_attention_scale(d.head_dim);
  auto run = [&](int threads) {
    std::vector<float> out(in.q.size()), lse(std::size_t(d.batch) * d.heads * d.seq_len);
    std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
    kt::with_threads(threads, [&] {
      attention_forward(out.data(), lse.data(), qf.data(), kf.data(), vf.data(), d, scale);
      attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), qf.data(), kf.data(),
                         vf.data(), d, scale);
    });
    std::vector<float> all = out;
    for (const auto* part : {&lse, &dq, &dk, &dv}) {
      all.insert(all.end(), part->begin(), part->end());
    }
    return all;
  };
  EXPECT_EQ(run(1), run(2));
}

}  // namespace
