// Table-driven tests of malformed specs: each case is a spec text and the
// exact diagnostics (file:line:col: severity: message) gcompile must print for
// it, in source order.
//
// Most cases edit gc::test::minimal_spec_sections(), whose lines are:
//
//    1 [experiment]           11 [optim]
//    2 name = "t"             12 lr = 1e-3
//    3                        13
//    4 [model]                14 [train]
//    5 vocab_size = 512       15 seq_len = 32
//    6 d_model = 64           16 global_batch = 4
//    7 n_layers = 2           17 steps = 10
//    8 n_heads = 4            18
//    9 d_ff = 128             19 [data]
//   10                        20 format = "synthetic"
//
// add("\n[sec]\n...") appends after line 20, so [sec] is line 22 and its
// first key line 23. edit("d_ff = 128", "d_ff = 128\nX") puts X on line 10.
//
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/text.hpp"
#include "spec/load.hpp"
#include "test_util.hpp"

namespace {

using Strings = std::vector<std::string>;

struct Case {
  std::string name;  // test name suffix (identifier characters only)
  std::string text;
  Strings expected;
  bool loads = false;  // true when only warnings are expected
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

std::string base() { return gc::test::minimal_spec_sections(); }

// The minimal spec with the unique occurrence of `from` replaced by `to`.
std::string edit(const std::string& from, const std::string& to) {
  std::string s = base();
  const auto at = s.find(from);
  if (at == std::string::npos || s.find(from, at + 1) != std::string::npos) {
    throw std::logic_error("edit: '" + from + "' is not unique in the minimal spec");
  }
  s.replace(at, from.size(), to);
  return s;
}

std::string add(const std::string& more) { return base() + more; }

// The minimal spec with several unique replacements, in order.
std::string edits(const std::vector<std::pair<std::string, std::string>>& changes) {
  std::string s = base();
  for (const auto& [from, to] : changes) {
    const auto at = s.find(from);
    if (at == std::string::npos) throw std::logic_error("edits: '" + from + "' is not in the spec");
    s.replace(at, from.size(), to);
  }
  return s;
}

std::string e(const std::string& where, const std::string& message) { return gc::test::spec_error(where, message); }
std::string w(const std::string& where, const std::string& message) {
  return "spec.toml:" + where + ": warning: " + message;
}
// A diagnostic for the whole file (no line).
std::string file_error(const std::string& message) { return "spec.toml: error: " + message; }

const std::string kSections =
    " (sections: data, distributed, experiment, init, metrics, model, moe, optim, schedule, train)";
const std::string kTensorVars =
    " (variables: d_model, n_layers, d_ff, head_dim, n_heads, n_kv_heads, vocab, width_mult, fan_in, fan_out, layer, "
    "gamma)";
const std::string kModelVars = " (variables: d_model, n_layers, d_ff, head_dim, n_heads, n_kv_heads, vocab, width_mult)";
const std::string kAllClasses =
    "embedding, attn_q, attn_k, attn_v, attn_gate, attn_o, mlp_gate, mlp_up, mlp_down, router, expert_gate, "
    "expert_up, expert_down, shared_gate, shared_up, shared_down, lm_head, norm";
const std::string kGammaWarning =
    " is above 1.25: seed 000 §2.4 finds the loss gets worse beyond γ = 1, where the network starts close to an "
    "identity map";

std::string moe_model() { return edit("d_ff = 128", "d_ff = 128\narch = \"moe\""); }

std::vector<Case> syntax_cases() {
  return {
      {"SyntaxUnterminatedString", edit("name = \"t\"", "name = \"t"),
       {e("2:10", "TOML syntax: Error while parsing string: unescaped control characters other than TAB (U+0009) "
                  "are explicitly prohibited")}},
      {"SyntaxMissingValue", edit("lr = 1e-3", "lr ="),
       {e("12:5", "TOML syntax: Error while parsing key-value pair: expected value, saw '\\n'")}},
      {"SyntaxUnclosedTableHeader", edit("[optim]", "[optim"),
       {e("11:7", "TOML syntax: Error while parsing table header: expected ']', saw '\\n'")}},
      {"SyntaxMissingEquals", edit("name = \"t\"", "name \"t\""),
       {e("2:6", "TOML syntax: Error while parsing key-value pair: expected '=', saw '\"'")}},
      {"SyntaxDuplicateKey", edit("d_ff = 128", "d_ff = 128\nd_ff = 256"),
       {e("10:8", "TOML syntax: Error while parsing key-value pair: cannot redefine existing integer 'd_ff'")}},
      {"SyntaxDuplicateTable", add("\n[model]\nqk_norm = true\n"),
       {e("22:1", "TOML syntax: Error while parsing table header: cannot redefine existing table 'model'")}},
      {"SyntaxTableOverValue", add("\n[model.d_ff]\nx = 1\n"),
       {e("22:1", "TOML syntax: Error while parsing table header: cannot redefine existing integer 'model.d_ff' as "
                  "table")}},
      {"SyntaxLeadingZero", edit("d_model = 64", "d_model = 064"),
       {e("6:14", "TOML syntax: Error while parsing decimal integer: leading zeroes are prohibited")}},
      {"SyntaxTrailingUnderscore", edit("d_model = 64", "d_model = 6_4_"),
       {e("6:15", "TOML syntax: Error while parsing decimal integer: underscores must be followed by digits")}},
      {"SyntaxUnknownEscape", edit("name = \"t\"", "name = \"a\\qb\""),
       {e("2:11", "TOML syntax: Error while parsing string: unknown escape sequence '\\q'")}},
      {"SyntaxUnterminatedArrayAtEof", add("\n[metrics.sink_score]\nlayers = [0, 1\n"),
       {e("23:16", "TOML syntax: Error while parsing array: encountered end-of-file")}},
      {"SyntaxIntegerOverflow", edit("steps = 10", "steps = 9223372036854775808"),
       {e("17:28", "TOML syntax: Error while parsing decimal integer: '9223372036854775808' is not representable in "
                   "64 bits")}},
      // Regression (was wrong before): toml++'s description contains a raw newline ("saw 't<LF>'"), which gcompile copies
      // into the diagnostic, breaking the one-line `file:line:col: error: message` format. Control characters
      // from toml++ messages should be escaped.
      {"SyntaxBareWordValueMessageHasRawNewline", edit("name = \"t\"", "name = t"),
       {e("2:9", "TOML syntax: Error while parsing boolean: expected 'true', saw 't\\n'")}},
  };
}

std::vector<Case> unknown_key_cases() {
  return {
      {"UnknownTopLevelKeyWithSuggestion", "experimnt = 1\n" + base(),
       {e("1:1", "unknown key 'experimnt' at the top level; did you mean 'experiment'?")}},
      // Regression (was wrong before): the list of sections offered to a user spec includes "preset", but [preset] is
      // rejected in user specs ("only allowed in preset files").
      {"UnknownTopLevelKeyListsSectionsWithoutPreset", "zzzzzzzz = 1\n" + base(),
       {e("1:1", "unknown key 'zzzzzzzz' at the top level" + kSections)}},
      // Regression (was wrong before): a key of a section written at the top level gets only the list of sections; the
      // "belongs in" hint (given for keys under the wrong section) is skipped at the top level.
      {"TopLevelKeyBelongsInSection", "seed = 3\n" + base(),
       {e("1:1", "unknown key 'seed' at the top level; 'seed' belongs in [experiment]")}},
      {"UnknownSectionWithSuggestion", add("\n[modle]\nd_model = 3\n"),
       {e("22:2", "unknown section [modle]; did you mean [model]?")}},
      // Regression (was wrong before): "preset" listed among the sections of a user spec (see above).
      {"UnknownSectionListsSectionsWithoutPreset", add("\n[zzzzzz]\nx = 3\n"),
       {e("22:2", "unknown section [zzzzzz]" + kSections)}},
      {"UnknownInitClassSection", add("\n[init.attn_qq]\ngamma = 1.0\n"),
       {e("22:7", "unknown section [init.attn_qq]; did you mean [init.attn_q]?")}},
      {"UnknownMetricSection", add("\n[metrics.sink_scor]\nenabled = false\n"),
       {e("22:10", "unknown section [metrics.sink_scor]; did you mean [metrics.sink_score]?")}},
      {"UnknownInitNormSection", add("\n[init.norm]\ngamma = 1\n"), {e("22:7", "unknown section [init.norm]")}},
      {"UnknownKeyInSection", edit("d_ff = 128", "d_ff = 128\nn_layer = 3"),
       {e("10:1", "unknown key 'n_layer' in [model]; did you mean 'n_layers'?")}},
      {"UnknownKeyWithoutHint", edit("d_ff = 128", "d_ff = 128\ncolour = \"blue\""),
       {e("10:1", "unknown key 'colour' in [model]")}},
      {"UnknownKeyInClassSection", add("\n[init.attn_q]\ngama = 1.0\n"),
       {e("23:1", "unknown key 'gama' in [init.attn_q]; did you mean 'gamma'?")}},
      {"UnknownKeyInMetricSection", add("\n[metrics.sink_score]\nintervall = 5\n"),
       {e("23:1", "unknown key 'intervall' in [metrics.sink_score]; did you mean 'interval'?")}},
      {"UnknownKeyInLrMult", add("\n[optim.lr_mult]\nembeding = 2\n"),
       {e("23:1", "unknown key 'embeding' in [optim.lr_mult]; did you mean 'embedding'?")}},
      {"UnknownDottedKey", add("\n[init]\nattn_q.gama = 1\n"),
       {e("23:8", "unknown key 'gama' in [init.attn_q]; did you mean 'gamma'?")}},
      {"UnknownArrayOfTables", add("\n[[experiments]]\nx = 1\n"),
       {e("22:3", "unknown key 'experiments' at the top level; did you mean 'experiment'?")}},
      {"KeyInWrongSectionNormEps", edit("steps = 10", "steps = 10\nnorm_eps = 1e-6"),
       {e("18:1", "unknown key 'norm_eps' in [train]; 'norm_eps' belongs in [model]")}},
      {"KeyInWrongSectionLr", edit("steps = 10", "steps = 10\nlr = 1e-3"),
       {e("18:1", "unknown key 'lr' in [train]; 'lr' belongs in [optim]")}},
      {"KeyInWrongSectionSteps", add("\n[schedule]\nsteps = 5\n"),
       {e("23:1", "unknown key 'steps' in [schedule]; 'steps' belongs in [train]")}},
      {"KeyInWrongSectionGamma", edit("d_ff = 128", "d_ff = 128\ngamma = 1.0"),
       {e("10:1", "unknown key 'gamma' in [model]; 'gamma' belongs in [init]")}},
      // Regression (was wrong before): 'std' exists in every [init.CLASS] table; the hint names the first class in schema
      // order ([init.embedding]) as if std belonged there specifically.
      {"KeyOfPerClassTableUnderInit", add("\n[init]\nstd = 0.02\n"),
       {e("23:1", "unknown key 'std' in [init]; 'std' belongs in [init.CLASS] (one table per class, e.g. "
                  "[init.attn_q])")}},
      // Regression (was wrong before): 'interval' exists in every [metrics.NAME] table; the hint names sink_score only.
      {"KeyOfPerMetricTableUnderMetrics", add("\n[metrics]\ninterval = 5\n"),
       {e("23:1", "unknown key 'interval' in [metrics]; 'interval' belongs in [metrics.NAME] (one table per "
                  "metric, e.g. [metrics.sink_score])")}},
      {"SectionWrittenAsValue", "moe = 3\n" + base(),
       {e("1:1", "'moe' is a section, not a value: write [moe] with keys such as n_dense_layers, layer_interval or "
                 "n_experts")}},
      {"SubsectionWrittenAsValue", edit("lr = 1e-3", "lr = 1e-3\nlr_mult = 2"),
       {e("13:1", "'optim.lr_mult' is a section, not a value: write [optim.lr_mult] with keys such as embedding, "
                  "attn_q or attn_k")}},
      {"MetricWrittenAsValue", add("\n[metrics]\nsink_score = false\n"),
       {e("23:1", "'metrics.sink_score' is a section, not a value: write [metrics.sink_score] with keys such as "
                  "enabled, interval or layers")}},
      {"ValueWrittenAsSection", add("\n[model.norm_eps]\nx = 1\n"),
       {e("22:8", "'model.norm_eps' is a value, not a section")}},
      // Regression (was wrong before): the key with a table value is reported, but is not marked invalid, so a second,
      // spurious "missing required key 'd_ff' in [model]" follows.
      {"RequiredValueWrittenAsInlineTable", edit("d_ff = 128", "d_ff = { x = 1 }"),
       {e("9:1", "'model.d_ff' is a value, not a section")}},
      // Regression (was wrong before): as above, for optim.lr.
      {"RequiredNumberWrittenAsInlineTable", edit("lr = 1e-3", "lr = { x = 1 }"),
       {e("12:1", "'optim.lr' is a value, not a section")}},
      {"PresetSectionInUserSpec", add("\n[preset]\nname = \"x\"\n"),
       {e("22:2", "[preset] is only allowed in preset files (to use a preset, set init.preset)")}},
      {"PresetSubsectionInUserSpec", add("\n[preset.foo]\nname = \"x\"\n"),
       {e("22:2", "[preset] is only allowed in preset files (to use a preset, set init.preset)")}},
      {"PresetInlineTableInUserSpec", "preset = { name = \"x\" }\n" + base(),
       {e("1:1", "[preset] is only allowed in preset files (to use a preset, set init.preset)")}},
  };
}

std::vector<Case> type_cases() {
  return {
      {"StringForNumber", edit("lr = 1e-3", "lr = \"1e-3\""),
       {e("12:6", "'optim.lr' must be a number, not string \"1e-3\"")}},
      {"StringForInteger", edit("vocab_size = 512", "vocab_size = \"512\""),
       {e("5:14", "'model.vocab_size' must be an integer, not string \"512\"")}},
      {"FloatForInteger", edit("d_model = 64", "d_model = 64.0"),
       {e("6:11", "'model.d_model' must be an integer, not float 64.0")}},
      {"IntegerForBoolean", edit("d_ff = 128", "d_ff = 128\nqk_norm = 1"),
       {e("10:11", "'model.qk_norm' must be true or false, not integer 1")}},
      {"BooleanForString", edit("name = \"t\"", "name = true"),
       {e("2:8", "'experiment.name' must be a string, not boolean true")}},
      {"ArrayForScalar", edit("d_model = 64", "d_model = [64]"),
       {e("6:11", "'model.d_model' must be an integer, not array")}},
      {"ArrayForString", edit("name = \"t\"", "name = [\"t\"]"),
       {e("2:8", "'experiment.name' must be a string, not array")}},
      {"ScalarForArray", edit("lr = 1e-3", "lr = 1e-3\nno_decay = \"norm\""),
       {e("13:12", "'optim.no_decay' must be an array of strings, not string \"norm\"")}},
      {"IntegerForChoice", edit("format = \"synthetic\"", "format = 1"),
       {e("20:10", "'data.format' must be a string (one of: llmc, text, synthetic, anchor), not integer 1")}},
      {"BooleanForFormula", edit("d_ff = 128", "d_ff = 128\nattn_scale = true"),
       {e("10:14", "'model.attn_scale' must be a number or an expression string, not boolean true")}},
      {"IntegerForExtends", edit("name = \"t\"", "name = \"t\"\nextends = 3"),
       {e("3:11", "'experiment.extends' must be a string, not integer 3")}},
      {"NestedArray", edit("lr = 1e-3", "lr = 1e-3\nbetas = [[0.9], [0.95]]"),
       {e("13:10", "'optim.betas' must be a flat array (found a nested array)")}},
      {"NestedArrayInIntegerList", add("\n[metrics.sink_score]\nlayers = [0, [1]]\n"),
       {e("23:14", "'metrics.sink_score.layers' must be a flat array (found a nested array)")}},
      {"TableInArray", edit("lr = 1e-3", "lr = 1e-3\nno_decay = [{ a = 1 }]"),
       {e("13:13", "'optim.no_decay' must be a flat array (found a nested table)")}},
      {"StringItemInIntegerList", add("\n[metrics.sink_score]\nlayers = [0, \"1\"]\n"),
       {e("23:14", "'metrics.sink_score.layers' items must be integers, not string \"1\"")}},
      {"FloatItemInIntegerList", add("\n[metrics.sink_score]\nlayers = [0, 1.5]\n"),
       {e("23:14", "'metrics.sink_score.layers' items must be integers, not float 1.5")}},
      {"BooleanItemInNumberList", edit("lr = 1e-3", "lr = 1e-3\nbetas = [true, 0.9]"),
       {e("13:10", "'optim.betas' items must be numbers, not boolean true")}},
      {"IntegerItemInStringList", edit("lr = 1e-3", "lr = 1e-3\nno_decay = [\"norm\", 3]"),
       {e("13:21", "'optim.no_decay' items must be strings, not integer 3")}},
      {"OffsetDateTimeForString", edit("name = \"t\"", "name = 1979-05-27T07:32:00Z"),
       {e("2:8", "'experiment.name' has a date/time value; gcompile specs use no dates")}},
      {"LocalTimeForString", edit("name = \"t\"", "name = 07:32:00"),
       {e("2:8", "'experiment.name' has a date/time value; gcompile specs use no dates")}},
      // Regression (was wrong before): train.steps is reported, then "missing training length" follows although steps was
      // written (its bad value should count as already reported, as for required keys).
      {"DateForSteps", edit("steps = 10", "steps = 1979-05-27"),
       {e("17:9", "'train.steps' has a date/time value; gcompile specs use no dates")}},
      // Regression (was wrong before): same spurious "missing training length" after a type error in train.steps.
      {"StringForSteps", edit("steps = 10", "steps = \"10\""),
       {e("17:9", "'train.steps' must be an integer, not string \"10\"")}},
  };
}

std::vector<Case> range_cases() {
  return {
      {"NormEpsZero", edit("d_ff = 128", "d_ff = 128\nnorm_eps = 0"),
       {e("10:12", "'model.norm_eps' must be > 0 (got 0)")}},
      {"NormEpsNegative", edit("d_ff = 128", "d_ff = 128\nnorm_eps = -1e-5"),
       {e("10:12", "'model.norm_eps' must be > 0 (got -1e-5)")}},
      {"GammaAboveFour", add("\n[init]\ngamma = 4.5\n"), {e("23:9", "'init.gamma' must be in [0, 4] (got 4.5)")}},
      {"GammaNegative", add("\n[init]\ngamma = -0.5\n"), {e("23:9", "'init.gamma' must be in [0, 4] (got -0.5)")}},
      {"ClassGammaAboveFour", add("\n[init.attn_q]\ngamma = 5\n"),
       {e("23:9", "'init.attn_q.gamma' must be in [0, 4] (got 5)")}},
      {"BetasTooShort", edit("lr = 1e-3", "lr = 1e-3\nbetas = [0.9]"),
       {e("13:9", "'optim.betas' must have exactly 2 items (got 1)")}},
      {"BetasTooLong", edit("lr = 1e-3", "lr = 1e-3\nbetas = [0.9, 0.95, 0.99]"),
       {e("13:9", "'optim.betas' must have exactly 2 items (got 3)")}},
      {"BetaEqualToOne", edit("lr = 1e-3", "lr = 1e-3\nbetas = [0.9, 1.0]"),
       {e("13:15", "'optim.betas' must be in [0, 0.999999] (got 1)")}},
      {"BetaIntegerOne", edit("lr = 1e-3", "lr = 1e-3\nbetas = [1, 0.5]"),
       {e("13:10", "'optim.betas' must be in [0, 0.999999] (got 1)")}},
      {"BetaNan", edit("lr = 1e-3", "lr = 1e-3\nbetas = [nan, 0.9]"),
       {e("13:10", "'optim.betas' must be a finite number (got nan)")}},
      {"ZeroStageFour", add("\n[distributed]\nzero_stage = 4\n"),
       {e("23:14", "'distributed.zero_stage' must be in [0, 3] (got 4)")}},
      {"LrNan", edit("lr = 1e-3", "lr = nan"), {e("12:6", "'optim.lr' must be a finite number (got nan)")}},
      {"LrZero", edit("lr = 1e-3", "lr = 0"), {e("12:6", "'optim.lr' must be > 0 (got 0)")}},
      {"RopeThetaInf", edit("d_ff = 128", "d_ff = 128\nrope_theta = inf"),
       {e("10:14", "'model.rope_theta' must be a finite number (got inf)")}},
      {"NormEpsMinusInf", edit("d_ff = 128", "d_ff = 128\nnorm_eps = -inf"),
       {e("10:12", "'model.norm_eps' must be a finite number (got -inf)")}},
      {"FormulaNan", edit("d_ff = 128", "d_ff = 128\nattn_scale = nan"),
       {e("10:14", "'model.attn_scale' must be a finite number (got nan)")}},
      {"VocabSizeOne", edit("vocab_size = 512", "vocab_size = 1"),
       {e("5:14", "'model.vocab_size' must be in [2, 2147483647] (got 1)")}},
      {"VocabSizeAboveInt32", edit("vocab_size = 512", "vocab_size = 2147483648"),
       {e("5:14", "'model.vocab_size' must be in [2, 2147483647] (got 2147483648)")}},
      {"DModelZero", edit("d_model = 64", "d_model = 0"), {e("6:11", "'model.d_model' must be >= 1 (got 0)")}},
      {"SeqLenOne", edit("seq_len = 32", "seq_len = 1"), {e("15:11", "'train.seq_len' must be >= 2 (got 1)")}},
      {"WarmupRatioAboveOne", add("\n[schedule]\nwarmup_ratio = 1.5\n"),
       {e("23:16", "'schedule.warmup_ratio' must be in [0, 1] (got 1.5)")}},
      {"MetricLayerNegative", add("\n[metrics.sink_score]\nlayers = [-1]\n"),
       {e("23:11", "'metrics.sink_score.layers' must be >= 0 (got -1)")}},
      {"SeedNegative", edit("name = \"t\"", "name = \"t\"\nseed = -1"),
       {e("3:8", "'experiment.seed' must be >= 0 (got -1)")}},
      // Regression (was wrong before): an out-of-range train.steps is followed by a spurious "missing training length".
      {"StepsZero", edit("steps = 10", "steps = 0"), {e("17:9", "'train.steps' must be >= 1 (got 0)")}},
      // Regression (was wrong before): same for an out-of-range train.tokens.
      {"TokensNegative", edit("steps = 10", "tokens = -5"),
       {e("17:10", "'train.tokens' must be >= 1 (got -5)")}},
  };
}

std::vector<Case> choice_and_list_cases() {
  return {
      {"ChoiceWithSuggestion", edit("d_ff = 128", "d_ff = 128\nnorm_placement = \"sandwhich\""),
       {e("10:18", "'model.norm_placement' has no option \"sandwhich\"; did you mean \"sandwich\"? (options: pre, "
                   "sandwich)")}},
      {"ChoiceWithoutSuggestion", edit("d_ff = 128", "d_ff = 128\nnorm_placement = \"post\""),
       {e("10:18", "'model.norm_placement' has no option \"post\" (options: pre, sandwich)")}},
      {"ChoiceIsCaseSensitive", edit("d_ff = 128", "d_ff = 128\narch = \"MoE\""),
       {e("10:8", "'model.arch' has no option \"MoE\"; did you mean \"moe\"? (options: dense, moe)")}},
      {"ChoiceDataFormat", edit("format = \"synthetic\"", "format = \"llm.c\""),
       {e("20:10", "'data.format' has no option \"llm.c\"; did you mean \"llmc\"? (options: llmc, text, synthetic, anchor)")}},
      {"AnchorNeedsNineTokenSequences", edit("format = \"synthetic\"", "format = \"anchor\""),
       {e("15:11", "data.format = \"anchor\" reads sequences of 9 input tokens: set 'train.seq_len' = 9 (got 32)")}},
      {"AnchorNeedsTheTargetsInTheVocabulary",
       edits({{"vocab_size = 512", "vocab_size = 100"}, {"seq_len = 32", "seq_len = 9"},
              {"format = \"synthetic\"", "format = \"anchor\""}}),
       {e("5:14", "data.format = \"anchor\" needs 'model.vocab_size' >= 110 (items 20-99 and every target; got 100)")}},
      {"AnchorHeldOutPairNeedsTwoAnchors",
       edits({{"seq_len = 32", "seq_len = 9"}, {"format = \"synthetic\"", "format = \"anchor\""}}) +
           "\n[data.anchor]\nheld_out = [3, 3]\n",
       {e("23:12", "'data.anchor.held_out': the held-out pair needs two different anchors, so that its mirror is "
                   "another pair (got [3, 3])")}},
      {"AnchorKeysNeedTheAnchorFormat", add("\n[data.anchor]\nseed = 3\n"),
       {e("23:1", "'data.anchor.seed' applies to data.format = \"anchor\" only")}},
      {"ChoiceDistribution", add("\n[init]\ndistribution = \"truncnormal\"\n"),
       {e("23:16", "'init.distribution' has no option \"truncnormal\"; did you mean \"trunc_normal\"? (options: "
                   "normal, trunc_normal, uniform)")}},
      {"DuplicateClassInList", edit("lr = 1e-3", "lr = 1e-3\nno_decay = [\"norm\", \"embedding\", \"norm\"]"),
       {e("13:34", "'optim.no_decay' lists \"norm\" twice")}},
      {"DuplicateClassInMetricList", add("\n[metrics.stable_rank]\nclasses = [\"attn_q\", \"attn_q\"]\n"),
       {e("23:22", "'metrics.stable_rank.classes' lists \"attn_q\" twice")}},
      {"DuplicateTextExtension", edit("format = \"synthetic\"", "format = \"synthetic\"\ntext_extensions = [\".txt\", \".txt\"]"),
       {e("21:28", "'data.text_extensions' lists \".txt\" twice")}},
      {"UnknownClassWithSuggestion", edit("lr = 1e-3", "lr = 1e-3\nno_decay = [\"norm\", \"embeding\"]"),
       {e("13:21", "'optim.no_decay' has no option \"embeding\"; did you mean \"embedding\"? (options: " + kAllClasses +
                       ")")}},
      {"UnknownClassWithoutSuggestion", edit("lr = 1e-3", "lr = 1e-3\nno_decay = [\"bias\"]"),
       {e("13:13", "'optim.no_decay' has no option \"bias\" (options: " + kAllClasses + ")")}},
      {"NormIsNotAWeightClass", add("\n[init]\ndepth_scaling_classes = [\"norm\"]\n"),
       {e("23:26", "'init.depth_scaling_classes' has no option \"norm\" (options: embedding, attn_q, attn_k, "
                   "attn_v, attn_gate, attn_o, mlp_gate, mlp_up, mlp_down, router, expert_gate, expert_up, "
                   "expert_down, shared_gate, shared_up, shared_down, lm_head)")}},
      {"MalformedTextExtensions",
       edit("format = \"synthetic\"", "format = \"synthetic\"\ntext_extensions = [\"txt\", \"\", \"./a\"]"),
       {e("21:20", "'data.text_extensions' items must look like \".txt\" (got \"txt\")"),
        e("21:27", "'data.text_extensions' items must look like \".txt\" (got \"\")"),
        e("21:31", "'data.text_extensions' items must look like \".txt\" (got \"./a\")")}},
  };
}

std::vector<Case> missing_cases() {
  return {
      {"MissingKeyPointsAtSectionHeader", edit("vocab_size = 512\n", ""),
       {e("4:1", "missing required key 'vocab_size' in [model]")}},
      {"MissingName", edit("name = \"t\"\n", ""), {e("1:1", "missing required key 'name' in [experiment]")}},
      {"MissingDff", edit("d_ff = 128\n", ""), {e("4:1", "missing required key 'd_ff' in [model]")}},
      {"MissingSectionIsFileLevel", edit("[optim]\nlr = 1e-3\n", ""),
       {file_error("missing required key 'lr' in [optim]")}},
      {"MissingExperimentSection", edit("[experiment]\nname = \"t\"\n", ""),
       {file_error("missing required key 'name' in [experiment]")}},
      {"MissingTrainSection", edit("[train]\nseq_len = 32\nglobal_batch = 4\nsteps = 10\n", ""),
       {file_error("missing required key 'seq_len' in [train]"),
        file_error("missing required key 'global_batch' in [train]"),
        file_error("missing training length: set 'steps' or 'tokens' in [train]")}},
      {"MissingTrainingLength", edit("steps = 10\n", ""),
       {e("14:1", "missing training length: set 'steps' or 'tokens' in [train]")}},
      {"EmptyFile", "",
       {file_error("missing required key 'name' in [experiment]"),
        file_error("missing required key 'vocab_size' in [model]"),
        file_error("missing required key 'd_model' in [model]"),
        file_error("missing required key 'n_layers' in [model]"),
        file_error("missing required key 'n_heads' in [model]"),
        file_error("missing required key 'd_ff' in [model]"), file_error("missing required key 'lr' in [optim]"),
        file_error("missing required key 'seq_len' in [train]"),
        file_error("missing required key 'global_batch' in [train]"),
        file_error("missing training length: set 'steps' or 'tokens' in [train]"),
        file_error("missing required key 'format' in [data]")}},
      {"MoeWithoutMoeSection", moe_model(),
       {file_error("missing required key 'n_experts' in [moe]"), file_error("missing required key 'top_k' in [moe]"),
        file_error("missing required key 'expert_d_ff' in [moe]")}},
      {"MoeMissingTopK", moe_model() + "\n[moe]\nn_experts = 4\nexpert_d_ff = 32\n",
       {e("23:1", "missing required key 'top_k' in [moe]")}},
      {"LlmcWithoutVal", edit("format = \"synthetic\"", "format = \"llmc\"\ntrain = \"d/train_*.bin\""),
       {e("19:1", "missing required key 'val' in [data]")}},
      {"LlmcWithoutFiles", edit("format = \"synthetic\"", "format = \"llmc\""),
       {e("19:1", "missing required key 'train' in [data]"), e("19:1", "missing required key 'val' in [data]")}},
      {"TextWithoutTrain", edit("format = \"synthetic\"", "format = \"text\""),
       {e("19:1", "missing required key 'train' in [data]")}},
      {"EmptyTrainPath", edit("format = \"synthetic\"", "format = \"text\"\ntrain = \"\""),
       {e("21:9", "'data.train' must not be empty")}},
  };
}

std::vector<Case> alternative_cases() {
  return {
      {"StepsAndTokens", edit("steps = 10", "steps = 10\ntokens = 1000"),
       {e("18:1", "'train.tokens' and 'train.steps' are alternatives; set only one")}},
      // Regression (was wrong before): toml++ iterates keys in name order, so the error lands on the first key in the
      // alphabet (tokens, line 17) instead of the second one written (steps, line 18).
      {"TokensThenSteps", edit("steps = 10", "tokens = 1000\nsteps = 10"),
       {e("18:1", "'train.steps' and 'train.tokens' are alternatives; set only one")}},
      {"WarmupRatioAndSteps", add("\n[schedule]\nwarmup_ratio = 0.1\nwarmup_steps = 5\n"),
       {e("24:1", "'schedule.warmup_steps' and 'schedule.warmup_ratio' are alternatives; set only one")}},
      {"GammaAndStdInOneFile", add("\n[init.attn_q]\ngamma = 1.0\nstd = 0.02\n"),
       {e("24:1", "'init.attn_q.std' and 'init.attn_q.gamma' are alternatives; set only one")}},
      // Regression (was wrong before): written std first, gamma second; the error is put on std (line 23) because of the
      // alphabetical iteration order.
      {"StdThenGammaInOneFile", add("\n[init.attn_q]\nstd = 0.02\ngamma = 1.0\n"),
       {e("24:1", "'init.attn_q.gamma' and 'init.attn_q.std' are alternatives; set only one")}},
  };
}

std::vector<Case> cross_field_cases() {
  return {
      {"HeadsNotDivisibleByKvHeads", edit("d_ff = 128", "d_ff = 128\nn_kv_heads = 3"),
       {e("10:14", "'model.n_heads' (4) must be divisible by 'model.n_kv_heads' (3)")}},
      {"KvHeadsAboveHeads", edit("d_ff = 128", "d_ff = 128\nn_kv_heads = 8"),
       {e("10:14", "'model.n_heads' (4) must be divisible by 'model.n_kv_heads' (8)")}},
      {"DModelNotDivisibleByHeads", edit("n_heads = 4", "n_heads = 5"),
       {e("8:11", "'model.d_model' (64) is not divisible by 'model.n_heads' (5); set 'model.head_dim'")}},
      {"HeadDimAllowsAnyHeadCount", edit("n_heads = 4", "n_heads = 5\nhead_dim = 16"), {}, true},
      {"SeqLenAboveMaxSeqLen", edit("d_ff = 128", "d_ff = 128\nmax_seq_len = 16"),
       {e("16:11", "'train.seq_len' (32) exceeds 'model.max_seq_len' (16)")}},
      {"GlobalBatchNotDivisibleByMicroBatch", edit("steps = 10", "steps = 10\nmicro_batch = 3"),
       {e("18:15", "'train.global_batch' (4) must be divisible by 'train.micro_batch' (3)")}},
      {"MicroBatchAboveGlobalBatch", edit("steps = 10", "steps = 10\nmicro_batch = 8"),
       {e("18:15", "'train.global_batch' (4) must be divisible by 'train.micro_batch' (8)")}},
      {"TopKAboveExperts", moe_model() + "\n[moe]\nn_experts = 4\ntop_k = 8\nexpert_d_ff = 32\n",
       {e("25:9", "'moe.top_k' (8) must not exceed 'moe.n_experts' (4)")}},
      {"ExchangeFactorBelowOne", moe_model() + "\n[moe]\nn_experts = 4\ntop_k = 2\nexpert_d_ff = 32\n\n[distributed]\nexpert_exchange_factor = 0.5\n",
       {e("29:26", "'distributed.expert_exchange_factor' = 0.5 would not hold a rank's own assignments: use 0 (the dropless worst case) or at least 1")}},
      {"DenseLayersLeaveNoMoeLayer",
       moe_model() + "\n[moe]\nn_experts = 4\ntop_k = 2\nexpert_d_ff = 32\nn_dense_layers = 2\n",
       {e("27:18", "'moe.n_dense_layers' (2) leaves no MoE layer among 2 layers")}},
      {"DenseLayersWithoutWidth",
       edit("d_ff = 128", "arch = \"moe\"") + "\n[moe]\nn_experts = 4\ntop_k = 2\nexpert_d_ff = 32\nn_dense_layers = 1\n",
       {e("26:18", "the 1 dense layer(s) need a width: set 'moe.dense_d_ff' or 'model.d_ff'")}},
      {"MetricLayerOutOfRange", add("\n[metrics.sink_score]\nlayers = [0, 1, 2]\n"),
       {e("23:17", "'metrics.sink_score.layers' names layer 2, but the model has layers 0..1")}},
  };
}

std::vector<Case> formula_cases() {
  // The column of a formula error points into the string, at the offending character.
  return {
      {"StdUnknownVariable", add("\n[init.attn_q]\nstd = \"0.02 / sqrt(2 * n_layer)\"\n"),
       {e("23:24", "in 'init.attn_q.std': unknown variable 'n_layer'; did you mean 'n_layers'?" + kTensorVars)}},
      {"StdUnbalancedParen", add("\n[init.attn_q]\nstd = \"0.02 / (2 * n_layers\"\n"),
       {e("23:15", "in 'init.attn_q.std': unbalanced '(': no matching ')'")}},
      {"StdTrailingGarbage", add("\n[init.attn_q]\nstd = \"0.02 )\"\n"),
       {e("23:13", "in 'init.attn_q.std': unexpected ')'")}},
      {"StdEmpty", add("\n[init.attn_q]\nstd = \"\"\n"), {e("23:8", "in 'init.attn_q.std': empty expression")}},
      {"StdNumberGluedToName", add("\n[init.attn_q]\nstd = \"0.02 / 2n_layers\"\n"),
       {e("23:15", "in 'init.attn_q.std': malformed number '2n' (write '*' between a number and a name)")}},
      {"StdWrongArgCount", add("\n[init.attn_q]\nstd = \"sqrt(1, 2)\"\n"),
       {e("23:8", "in 'init.attn_q.std': sqrt takes 1 argument, got 2")}},
      {"StdExtraSpacesAroundEquals", add("\n[init.attn_q]\nstd   =   \"fan_in ^ -0.5 * foo\"\n"),
       {e("23:28", "in 'init.attn_q.std': unknown variable 'foo'" + kTensorVars)}},
      {"StdLiteralString", add("\n[init.attn_q]\nstd = '0.02 * foo'\n"),
       {e("23:15", "in 'init.attn_q.std': unknown variable 'foo'" + kTensorVars)}},
      {"StdInInlineTable", add("\n[init]\nattn_q = { std = \"0.02 * foo\" }\n"),
       {e("23:26", "in 'init.attn_q.std': unknown variable 'foo'" + kTensorVars)}},
      {"ModelFormulaCannotUseTensorVariables", edit("d_ff = 128", "d_ff = 128\nattn_scale = \"1/fan_in\""),
       {e("10:17", "in 'model.attn_scale': unknown variable 'fan_in'" + kModelVars)}},
      {"LrMultUnknownFunction", add("\n[optim.lr_mult]\nattn_q = \"log(width_mult)\"\n"),
       {e("23:11", "in 'optim.lr_mult.attn_q': unknown function 'log' (functions: sqrt, min, max)")}},
      // Regression (was wrong before): the column is computed as quote + byte offset in the decoded string, so escapes
      // shift it: "\u0030" is 6 source characters for 1 byte. 'foo' is at column 20, reported at 15.
      {"StdColumnAfterEscape", add("\n[init.attn_q]\nstd = \"\\u0030.02 * foo\"\n"),
       {e("23:20", "in 'init.attn_q.std': unknown variable 'foo'" + kTensorVars)}},
      // Regression (was wrong before): in a multi-line string the expression starts on the next line; the error is
      // reported at 23:15 (past the end of line 23, `std = """`) instead of line 24, column 8.
      {"StdLineInMultilineString", add("\n[init.attn_q]\nstd = \"\"\"\n0.02 * foo\"\"\"\n"),
       {e("24:8", "in 'init.attn_q.std': unknown variable 'foo'" + kTensorVars)}},
      // Regression (was wrong before): the expression parser quotes a single byte of the multi-byte character 'γ', so the
      // diagnostic contains invalid UTF-8 ("unexpected '\xCE'").
      {"StdNonAsciiCharacterQuotedWhole", add("\n[init.attn_q]\nstd = \"γ + 1\"\n"),
       {e("23:8", "in 'init.attn_q.std': unexpected 'γ' where a value was expected")}},
  };
}

std::vector<Case> preset_cases() {
  return {
      {"UnknownPresetWithSuggestion", add("\n[init]\npreset = \"gama\"\n"),
       {e("23:10", "unknown init preset \"gama\"; did you mean \"gamma\"? (presets: " + gc::join(gc::preset_names(), ", ") + ")")}},
      {"UnknownPresetWithoutSuggestion", add("\n[init]\npreset = \"zzzzzz\"\n"),
       {e("23:10", "unknown init preset \"zzzzzz\" (presets: " + gc::join(gc::preset_names(), ", ") + ")")}},
  };
}

std::vector<Case> warning_cases() {
  return {
      {"WarnGammaAboveOnePointTwoFive", add("\n[init]\ngamma = 1.5\n"),
       {w("23:9", "'init.gamma' = 1.5" + kGammaWarning)},
       true},
      {"WarnClassGammaAboveOnePointTwoFive", add("\n[init.mlp_down]\ngamma = 1.5\n"),
       {w("23:9", "'init.mlp_down.gamma' = 1.5" + kGammaWarning)},
       true},
      {"NoWarningAtOnePointTwoFive", add("\n[init]\ngamma = 1.25\n"), {}, true},
      {"WarnGammaAbovePreset", add("\n[init]\npreset = \"gamma\"\ngamma = 1.5\n"),
       {w("24:9", "'init.gamma' = 1.5" + kGammaWarning)},
       true},
      {"WarnMoeKeysInDenseModel", add("\n[moe]\nn_experts = 4\ntop_k = 2\n"),
       {w("23:1", "'moe.n_experts' has no effect: 'model.arch' is \"dense\"")},
       true},
      // Regression (was wrong before): the single warning should point at the first moe key written (top_k, line 23); it
      // points at the alphabetically first one (n_experts, line 24).
      {"WarnMoeKeysInDenseModelFirstInSource", add("\n[moe]\ntop_k = 2\nn_experts = 4\n"),
       {w("23:1", "'moe.top_k' has no effect: 'model.arch' is \"dense\"")},
       true},
      {"ErrorsAndWarningsTogether", add("\n[init]\ngamma = 1.5\ncutoff = 0\n"),
       {w("23:9", "'init.gamma' = 1.5" + kGammaWarning), e("24:10", "'init.cutoff' must be > 0 (got 0)")}},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto group : {syntax_cases(), unknown_key_cases(), type_cases(), range_cases(), choice_and_list_cases(),
                     missing_cases(), alternative_cases(), cross_field_cases(), formula_cases(), preset_cases(),
                     warning_cases()}) {
    all.insert(all.end(), group.begin(), group.end());
  }
  return all;
}

class DiagnosticsTest : public ::testing::TestWithParam<Case> {};

TEST_P(DiagnosticsTest, ReportsExactly) {
  const Case& c = GetParam();
  gc::Diagnostics diags;
  auto spec = gc::test::spec_from(c.text, diags);
  EXPECT_EQ(gc::test::messages(diags), c.expected) << "spec:\n" << c.text;
  EXPECT_EQ(spec.has_value(), c.loads);
  EXPECT_EQ(diags.has_errors(), !c.loads);
}

INSTANTIATE_TEST_SUITE_P(Spec, DiagnosticsTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(DiagnosticsTableTest, NamesAreUniqueAndThereAreEnoughCases) {
  const auto cases = all_cases();
  std::set<std::string> names;
  for (const auto& c : cases) EXPECT_TRUE(names.insert(c.name).second) << c.name;
  EXPECT_GE(cases.size(), 45u);
}

TEST(DiagnosticsTest, MinimalSpecIsClean) {
  gc::Diagnostics diags;
  auto spec = gc::test::spec_from(base(), diags);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(gc::test::messages(diags), Strings{});
}

// Loader errors (flattening) and validation errors (cross-field, formulas)
// come from different passes; the output interleaves them by position.
TEST(DiagnosticsTest, InterleavesLoaderAndValidationErrorsBySourcePosition) {
  const std::string text = add("\n[init.attn_q]\nstd = \"foo\"\n\n[metrics.sink_score]\nlayers = [5]\nenabled = 3\n");
  const std::string spec_text = edit("n_heads = 4", "n_heads = 5") + text.substr(base().size());
  gc::Diagnostics diags;
  EXPECT_FALSE(gc::test::spec_from(spec_text, diags).has_value());
  EXPECT_EQ(gc::test::messages(diags),
            (Strings{e("8:11", "'model.d_model' (64) is not divisible by 'model.n_heads' (5); set 'model.head_dim'"),
                     e("23:8", "in 'init.attn_q.std': unknown variable 'foo'" + kTensorVars),
                     e("26:11", "'metrics.sink_score.layers' names layer 5, but the model has layers 0..1"),
                     e("27:11", "'metrics.sink_score.enabled' must be true or false, not integer 3")}));
}

}  // namespace
