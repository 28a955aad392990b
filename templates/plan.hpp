
// The parameter table: every trainable tensor with its init rule (seed 000
// §4.2: σ = fan^-γ unless the spec gives a std expression) and optimizer
// settings. Row order is the order of the checkpoint and of the optimizer.
#pragma once

#include <array>
#include <cstdint>

namespace gcm {

enum class InitKind { normal, trunc_normal, uniform, ones };

struct ParamInfo {
  const char* name;      // HF Llama-style name
  const char* cls;       // parameter class
  int layer;             // -1 outside the layer stack
  int rank;
  std::int64_t shape[3];
  std::int64_t numel;
  InitKind init;
  double std;            // σ of the rule (trunc_normal: of the untruncated normal)
  double cutoff;         // trunc_normal: ±cutoff·σ
  double lr_mult;
  double weight_decay;   // decoupled λ (seed 003 eq. 1); 0 when exempt
};

inline constexpr int kNumParams = 21;
inline constexpr std::int64_t kTotalParams = 106816;

inline constexpr ParamInfo kParams[kNumParams] = {
    {"model.embed_tokens.weight", "embedding", -1, 2, {256, 64, 1}, 16384, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.0.input_layernorm.weight", "norm", 0, 1, {64, 1, 1}, 64, InitKind::ones, 0.0, 0.0, 1.0, 0.0},
    {"model.layers.0.self_attn.q_proj.weight", "attn_q", 0, 2, {64, 64, 1}, 4096, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.0.self_attn.k_proj.weight", "attn_k", 0, 2, {32, 64, 1}, 2048, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.0.self_attn.v_proj.weight", "attn_v", 0, 2, {32, 64, 1}, 2048, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.0.self_attn.o_proj.weight", "attn_o", 0, 2, {64, 64, 1}, 4096, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.0.post_attention_layernorm.weight", "norm", 0, 1, {64, 1, 1}, 64, InitKind::ones, 0.0, 0.0, 1.0, 0.0},
    {"model.layers.0.mlp.gate_proj.weight", "mlp_gate", 0, 2, {128, 64, 1}, 8192, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.0.mlp.up_proj.weight", "mlp_up", 0, 2, {128, 64, 1}, 8192, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.0.mlp.down_proj.weight", "mlp_down", 0, 2, {64, 128, 1}, 8192, InitKind::normal, 0.08838834764831845, 0.0, 1.0, 0.1},
    {"model.layers.1.input_layernorm.weight", "norm", 1, 1, {64, 1, 1}, 64, InitKind::ones, 0.0, 0.0, 1.0, 0.0},
    {"model.layers.1.self_attn.q_proj.weight", "attn_q", 1, 2, {64, 64, 1}, 4096, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.1.self_attn.k_proj.weight", "attn_k", 1, 2, {32, 64, 1}, 2048, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.1.self_attn.v_proj.weight", "attn_v", 1, 2, {32, 64, 1}, 2048, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.1.self_attn.o_proj.weight", "attn_o", 1, 2, {64, 64, 1}, 4096, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.1.post_attention_layernorm.weight", "norm", 1, 1, {64, 1, 1}, 64, InitKind::ones, 0.0, 0.0, 1.0, 0.0},
    {"model.layers.1.mlp.gate_proj.weight", "mlp_gate", 1, 2, {128, 64, 1}, 8192, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.1.mlp.up_proj.weight", "mlp_up", 1, 2, {128, 64, 1}, 8192, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
    {"model.layers.1.mlp.down_proj.weight", "mlp_down", 1, 2, {64, 128, 1}, 8192, InitKind::normal, 0.08838834764831845, 0.0, 1.0, 0.1},
    {"model.norm.weight", "norm", -1, 1, {64, 1, 1}, 64, InitKind::ones, 0.0, 0.0, 1.0, 0.0},
    {"lm_head.weight", "lm_head", -1, 2, {256, 64, 1}, 16384, InitKind::normal, 0.125, 0.0, 1.0, 0.1},
};

// Row indices into kParams (-1: the model has no such tensor).
inline constexpr int kParamEmbed = 0;
inline constexpr int kParamEmbedNorm = -1;
inline constexpr int kParamFinalNorm = 19;
inline constexpr int kParamLmHead = 20;

struct LayerParams {
  int input_norm;
  int q;
  int k;
  int v;
  int q_norm;
  int k_norm;
  int gate;
  int o;
  int attn_out_norm;
  int post_attn_norm;
  int mlp_gate;
  int mlp_up;
  int mlp_down;
  int mlp_out_norm;
};

inline constexpr int kNumLayers = 2;
inline constexpr LayerParams kLayerParams[kNumLayers] = {
    {1, 2, 3, 4, -1, -1, -1, 5, -1, 6, 7, 8, 9, -1},
    {10, 11, 12, 13, -1, -1, -1, 14, -1, 15, 16, 17, 18, -1},
};

// What each metric measures ([metrics.NAME] layers and classes in the spec).
inline constexpr bool kSinkScoreLayers[kNumLayers] = {true, true};
inline constexpr bool kRmsnormFactorLayers[kNumLayers] = {true, true};
inline constexpr bool kCosineSimilarityLayers[kNumLayers] = {true, true};
inline constexpr bool kCosineSimilarityTensors[kNumParams] = {false, false, true, true, true, true, false, false, true, true, false, true, true, true, true, false, false, true, true, false, false};
inline constexpr bool kStableRankLayers[kNumLayers] = {true, true};
inline constexpr bool kStableRankTensors[kNumParams] = {false, false, true, true, true, true, false, false, true, true, false, true, true, true, true, false, false, true, true, false, false};
inline constexpr bool kParamNormTensors[kNumParams] = {false, false, true, true, true, true, false, false, true, true, false, true, true, true, true, false, false, true, true, false, false};
inline constexpr bool kGradNormTensors[kNumParams] = {false, false, true, true, true, true, false, false, true, true, false, true, true, true, true, false, false, true, true, false, false};
inline constexpr bool kUpdateRatioTensors[kNumParams] = {false, false, true, true, true, true, false, false, true, true, false, true, true, true, true, false, false, true, true, false, false};
inline constexpr bool kActivationRmsLayers[kNumLayers] = {true, true};
inline constexpr bool kAttentionEntropyLayers[kNumLayers] = {true, true};
// Steps at which cosine matrices are saved as heatmaps (metrics.cosine_similarity.image_steps).
inline constexpr std::array<std::int64_t, 0> kCosineImageSteps = {};

}  // namespace gcm
