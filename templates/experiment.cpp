// What names this experiment and where its data is, as knobs: the values a
// sweep over init or seed changes (with plan_init.cpp), kept out of the
// headers so every other object file of the tree is the same across the
// sweep's points and is compiled once (ccache; docs/architecture.md).
#include "config.hpp"
#include "gc/knob.hpp"

namespace gc::tree {

// --- experiment
constexpr const char* kExperimentName = gc::knob<const char*>("experiment.name", "template");
constexpr std::uint64_t kSeed = gc::knob<std::uint64_t>("experiment.seed", 1234);

// --- data and provenance (resolved by gcompile when it generates the tree)
constexpr const char* kTrainData = gc::knob<const char*>("plan.train_data", "");
constexpr const char* kValData = gc::knob<const char*>("plan.val_data", "");
constexpr const char* kVocabFile = gc::knob<const char*>("plan.vocab_file", "");
constexpr const char* kSpecHash = gc::knob<const char*>("plan.spec_hash", "");
constexpr const char* kGcompileVersion = gc::knob<const char*>("plan.gcompile_version", "");
constexpr std::uint64_t kAnchorSeed = gc::knob<std::uint64_t>("plan.anchor_seed", 0);

}  // namespace gc::tree
