// The fixture of the emulated-GPU data-parallel tests (tests/e2e/gpu_data_parallel_emulated_test.cpp,
// tests/e2e/gpu_expert_zero_emulated_test.cpp): a generated tree's train built against the CUDA
// emulator and its NCCL over MPI (tests/cuda_emulator/tree_train), run under mpirun, and the
// helpers that read its runs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "tree_test_util.hpp"

namespace gc::test::gpu_emulated {

namespace fs = std::filesystem;

// 4 sequences per step in micro-batches of 2; three layers, each its own bucket (bucket_mb is
// 1 KiB: smaller than a layer's gradients).
inline const std::string kGpuDataParallelSpec = gc::test::fixture_spec("gpu_data_parallel.toml");

inline std::string spec_text(const std::string& precision, int zero_stage, const std::string& backend = "auto") {
  std::string s = kGpuDataParallelSpec;
  s.replace(s.find("BACKEND"), 7, backend);
  s.replace(s.find("PRECISION"), 9, precision);
  s.replace(s.find("ZERO"), 4, std::to_string(zero_stage));
  return s;
}

// The spec as an MoE of 4 experts (top-2) whose d_model and expert_d_ff are whole 64-column
// tiles, so that in bf16 the experts run the grouped GEMMs (cuda/grouped_gemm.cuh), under expert
// parallelism on each rank's exchanged rows; the stable rank measures expert tensors too, whose
// masters lie in blocks (or shards of blocks) on different ranks.
inline std::string moe_spec_text(const std::string& precision, int zero_stage) {
  std::string spec = spec_text(precision, zero_stage);
  spec.replace(spec.find("[model]\n"), 8, "[model]\narch = \"moe\"\n");
  spec.replace(spec.find("d_model = 32"), 12, "d_model = 64");
  spec.replace(spec.find("[optim]"), 7, "[moe]\nn_experts = 4\ntop_k = 2\nexpert_d_ff = 64\n\n[optim]");
  spec.replace(spec.find("stable_rank.interval = 3"), 24,
               "stable_rank.interval = 3\nstable_rank.classes = [\"expert_up\", \"expert_down\", \"attn_q\"]");
  return spec;
}

class GpuDataParallelEmulated : public gc::test::TreeTest {
 protected:
  void SetUp() override {
    gc::test::TreeTest::SetUp();
#ifndef GCOMPILE_CUDA_EMULATOR_LIBRARY
    GTEST_SKIP() << "built without the CUDA emulator (GCOMPILE_CUDA_EMULATED_TESTS=OFF)";
#else
    if (sh("command -v mpirun && command -v mpicxx").status != 0) {
      if (gc::test::in_ci()) FAIL() << "mpirun or mpicxx is missing (scripts/setup installs Open MPI)";
      GTEST_SKIP() << "no Open MPI (apt install openmpi-bin libopenmpi-dev)";
    }
#endif
  }
  // Generates the spec's tree and builds its train against the emulator, and its analyze for the
  // tests that measure with it (expect_metrics_match_cpu).
  fs::path build(const std::string& name, const std::string& spec, [[maybe_unused]] bool with_analyze = false) {
    const fs::path spec_file = dir_ / (name + ".toml");
    std::ofstream(spec_file) << spec;
    const fs::path out = dir_ / name;
#ifdef GCOMPILE_CUDA_EMULATOR_LIBRARY
    const std::string tree_train = std::string(GCOMPILE_SOURCE_DIR) + "/tests/cuda_emulator/tree_train" +
                                   (with_analyze ? " " : " --train-only ");
    const Outcome built = sh("bash " + tree_train + GCOMPILE_BINARY + " " + spec_file.string() + " " + out.string() + " " +
                             GCOMPILE_SOURCE_DIR + "/tests/cuda_emulator " + GCOMPILE_CUDA_EMULATOR_LIBRARY + " " +
                             GCOMPILE_BLAS_LIBRARIES);
    EXPECT_EQ(built.status, 0) << built.output;
#endif
    return out;
  }
  // One process, or `ranks` under mpirun, on the emulated GPUs (one per rank unless `gpus` says
  // how many each process sees; with gpu_per_rank each rank's are its own, as under
  // srun --gpus-per-task), or on `device`.
  Outcome train(const fs::path& tree, const std::string& args, int ranks = 0, const std::string& device = "cuda",
                int gpus = 0, bool gpu_per_rank = false) {
    const std::string program = (tree / "train").string() + " --device " + device + " " + args;
    const std::string env = "GC_BLASLT_CACHE=off OMP_NUM_THREADS=1 GC_CUDA_EMULATOR_GPU_PER_RANK=" +
                            std::string(gpu_per_rank ? "1" : "0") + " GC_CUDA_EMULATOR_DEVICES=" +
                            std::to_string(gpus > 0 ? gpus : std::max(ranks, 1)) + " ";
    if (ranks == 0) return sh(env + program);
    return sh(env + "timeout -k 10 600 mpirun --allow-run-as-root --oversubscribe -x GC_BLASLT_CACHE -x "
                    "GC_CUDA_EMULATOR_DEVICES -x GC_CUDA_EMULATOR_GPU_PER_RANK -np " + std::to_string(ranks) + " " +
                    program);
  }
};

inline nlohmann::json summary(const fs::path& run) { return read_jsonl(run / "metrics.jsonl").back(); }

// The records of one metric, in order.
inline std::vector<nlohmann::json> metric(const fs::path& run, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& r : read_jsonl(run / "metrics.jsonl")) {
    if (r.value("metric", "") == name) out.push_back(r);
  }
  return out;
}

inline const fs::path kLast = fs::path("checkpoints") / "step_000006";

// The metric records of a run (or an analyze output) at one step, in order.
inline std::vector<nlohmann::json> metric_records(const fs::path& jsonl, std::int64_t step) {
  std::vector<nlohmann::json> out;
  for (const auto& r : read_jsonl(jsonl)) {
    if (r.contains("metric") && r.value("step", std::int64_t(-1)) == step) out.push_back(r);
  }
  return out;
}

// The largest |got − ref| / max(|ref|, 1e-3) over every number of the records (engine/
// metrics_parity.cuh's measure), and where.
inline void worst_difference(const nlohmann::json& got, const nlohmann::json& ref, const std::string& where, double& worst,
                      std::string& at) {
  if (ref.is_number()) {
    const double e = got.is_number() ? std::fabs(got.get<double>() - ref.get<double>()) /
                                           std::max(std::fabs(ref.get<double>()), 1e-3)
                                     : 1e30;
    if (e > worst) {
      worst = e;
      at = where;
    }
  } else if (ref.is_object() || ref.is_array()) {
    for (auto it = ref.begin(); it != ref.end(); ++it) {
      const std::string key = ref.is_object() ? it.key() : std::to_string(std::distance(ref.begin(), it));
      if (key == "step") continue;
      const nlohmann::json none;
      const nlohmann::json& other = ref.is_object() ? (got.contains(key) ? got[key] : none)
                                                    : (std::size_t(std::distance(ref.begin(), it)) < got.size()
                                                           ? got[std::size_t(std::distance(ref.begin(), it))]
                                                           : none);
      worst_difference(other, *it, where + "/" + key, worst, at);
    }
  }
}

// Every metric of a GPU measurement equals the CPU's (same weights, same batches) within 1e-5.
inline void expect_same_metrics(const std::vector<nlohmann::json>& gpu, const std::vector<nlohmann::json>& cpu,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  ASSERT_GT(cpu.size(), 5u) << what;
  double worst = 0.0;
  std::string at;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].value("metric", ""), cpu[i].value("metric", "")) << what;
    worst_difference(gpu[i], cpu[i], cpu[i].value("metric", ""), worst, at);
  }
  EXPECT_LT(worst, 1e-5) << what << ": " << at;
  std::printf("[kernel-error] %-48s %.3e (%s)\n", what.c_str(), worst, at.c_str());
}

}  // namespace gc::test::gpu_emulated
