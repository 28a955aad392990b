#include "specialize/specialize.hpp"

#include <clang/Format/Format.h>
#include <clang/Tooling/Core/Replacement.h>

#include "common/text.hpp"
#include "specialize/clang_tool.hpp"
#include "specialize/passes.hpp"
#include "specialize/toolchain.hpp"

namespace gc {

bool is_program_main(const std::string& path) { return ends_with(path, "_main.cpp") || ends_with(path, "_main.cu"); }

namespace {

bool is_header(const std::string& path) {
  return ends_with(path, ".hpp") || ends_with(path, ".h") || ends_with(path, ".cuh");
}

bool is_cuda(const std::string& path) { return ends_with(path, ".cuh") || ends_with(path, ".cu"); }

// A CUDA source other than a program's main (engine/cuda_engine.cu) is parsed with the CUDA
// headers, which it includes anyway: one CUDA parse less per pass (1.4 s of a specialization's
// 8.6). A main stays alone (two mains cannot share a translation unit).
bool joins_cuda_headers(const std::string& path) { return ends_with(path, ".cu") && !is_program_main(path); }

struct Workspace {
  std::map<std::string, std::string> texts;   // absolute path -> current text
  std::map<std::string, std::string> extra;   // mapped in, never specialized (the runtime)
  std::map<std::string, std::string> labels;  // absolute path -> diagnostic path
  std::vector<std::string> order;             // absolute paths, in input order
};

// What one parse specializes: a source file on its own, or every header of one language
// together through a generated main file that includes them all (a CUDA parse costs seconds,
// mostly the toolkit's headers, so the kernel headers share one, with the CUDA sources that are
// not a program's main).
struct Batch {
  std::string main_path, main_text;  // main_text empty: main_path is itself a target
  std::vector<std::string> targets;
};

std::vector<Batch> batches_of(const std::vector<std::string>& paths, const std::string& include_root) {
  Batch cuda_headers{include_root + "/.gc-headers.cu", "", {}}, cpp_headers{include_root + "/.gc-headers.cpp", "", {}};
  std::vector<Batch> out;
  for (const auto& path : paths) {
    if (!is_header(path) && !joins_cuda_headers(path)) {
      out.push_back({path, "", {path}});
      continue;
    }
    Batch& b = is_cuda(path) ? cuda_headers : cpp_headers;
    b.main_text += "#include \"" + path + "\"\n";
    b.targets.push_back(path);
  }
  for (Batch* b : {&cpp_headers, &cuda_headers}) {
    if (!b->targets.empty()) out.push_back(std::move(*b));
  }
  return out;
}

// Runs one pass over every file against the current texts; returns the new
// texts (all files see each other's texts from before the pass).
bool run_pass(Workspace& ws, const std::string& include_root, const KnobTable& knobs, const Toolchain& toolchain,
              bool knob_pass, std::set<std::string>& used_knobs, Diagnostics& diags) {
  std::map<std::string, std::string> next = ws.texts;
  // A pass can only edit what it looks for: knob initializers (`gc::knob<`)
  // or `if constexpr` statements. A file with neither comes out as it went
  // in, unparsed; the tree's build compiles it like any other.
  const char* const needle = knob_pass ? "knob<" : "if constexpr";
  std::vector<std::string> to_parse;
  for (const auto& path : ws.order) {
    if (ws.texts[path].find(needle) != std::string::npos) to_parse.push_back(path);
  }
  bool ok = true;
  for (const Batch& batch : batches_of(to_parse, include_root)) {
    PassContext ctx;
    ctx.targets.insert(batch.targets.begin(), batch.targets.end());
    ctx.knobs = &knobs;
    ctx.labels = &ws.labels;
    ctx.diags = &diags;
    std::map<std::string, std::string> files = ws.texts;
    files.insert(ws.extra.begin(), ws.extra.end());
    if (!batch.main_text.empty()) files[batch.main_path] = batch.main_text;
    ParseRequest request{batch.main_path, files, ws.labels, &toolchain, include_root};
    const std::size_t errors_before = diags.error_count();
    const bool parsed = run_clang(request, knob_pass ? make_knob_action(ctx) : make_prune_action(ctx), diags);
    if (!parsed || diags.error_count() > errors_before) {
      ok = false;
      continue;
    }
    for (const auto& path : batch.targets) {
      const auto edits = ctx.edits.find(path);
      if (edits != ctx.edits.end()) next[path] = apply_edits(ws.texts[path], edits->second);
    }
    used_knobs.insert(ctx.used_knobs.begin(), ctx.used_knobs.end());
  }
  if (ok) ws.texts = std::move(next);
  return ok;
}

}  // namespace

Toolchain default_toolchain() {
  Toolchain tc;
  tc.resource_dir = kClangResourceDir;
  tc.cuda_path = kCudaPath;
  return tc;
}

std::optional<SpecializeResult> specialize(const std::vector<TemplateFile>& templates, const std::string& include_root,
                                           const std::string& label_root, const KnobTable& knobs,
                                           const Toolchain& toolchain, Diagnostics& diags,
                                           const std::map<std::string, std::string>& extra_files,
                                           const std::map<std::string, std::string>& after_knobs) {
  Workspace ws;
  ws.extra = extra_files;
  for (const auto& t : templates) {
    const std::string abs = include_root + "/" + t.path;
    ws.texts[abs] = t.text;
    ws.labels[abs] = label_root.empty() ? t.path : label_root + "/" + t.path;
    ws.order.push_back(abs);
  }
  SpecializeResult result;
  if (!run_pass(ws, include_root, knobs, toolchain, true, result.used_knobs, diags)) return std::nullopt;
  for (const auto& [path, text] : after_knobs) ws.texts[include_root + "/" + path] = text;
  std::set<std::string> unused;
  if (!run_pass(ws, include_root, knobs, toolchain, false, unused, diags)) return std::nullopt;
  for (const auto& t : templates) {
    const std::string abs = include_root + "/" + t.path;
    result.files.push_back({t.path, format_source(t.path, ws.texts[abs])});
  }
  return result;
}

std::string format_source(const std::string& path, const std::string& text) {
  clang::format::FormatStyle style = clang::format::getGoogleStyle(clang::format::FormatStyle::LK_Cpp);
  style.ColumnLimit = 100;
  style.MaxEmptyLinesToKeep = 1;
  style.SortIncludes = clang::format::FormatStyle::SI_Never;
  // Latest, not Auto: a file that Auto judges C++03 gets its `>>` split into
  // `> >`, which turns a CUDA launch's `>>>` into `> > >` (no longer CUDA).
  style.Standard = clang::format::FormatStyle::LS_Latest;
  const clang::tooling::Range all(0, static_cast<unsigned>(text.size()));
  const clang::tooling::Replacements replacements = clang::format::reformat(style, text, {all}, path);
  auto formatted = clang::tooling::applyAllReplacements(text, replacements);
  if (!formatted) {
    llvm::consumeError(formatted.takeError());
    return text;
  }
  return *formatted;
}

}  // namespace gc
