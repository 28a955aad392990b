#include "specialize/clang_tool.hpp"
#include "specialize/passes.hpp"

#include <clang/AST/ASTContext.h>
#include <clang/AST/DeclBase.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/Path.h>

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/FileManager.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/VirtualFileSystem.h>

namespace gc {

namespace {

// CUDA 13 removed texture_fetch_functions.h, which clang 19's CUDA wrapper
// still includes; an empty stand-in after the real include paths fixes that.
constexpr const char* kCudaShimDir = "/gcompile-cuda-shim";

class CollectingConsumer : public clang::DiagnosticConsumer {
 public:
  CollectingConsumer(Diagnostics& diags, const std::map<std::string, std::string>& labels)
      : diags_(diags), labels_(labels) {}

  void HandleDiagnostic(clang::DiagnosticsEngine::Level level, const clang::Diagnostic& info) override {
    clang::DiagnosticConsumer::HandleDiagnostic(level, info);
    if (level < clang::DiagnosticsEngine::Error) return;
    llvm::SmallString<256> text;
    info.FormatDiagnostic(text);
    SourceLoc loc;
    if (info.getLocation().isValid() && info.hasSourceManager()) {
      loc = to_source_loc(info.getSourceManager(), info.getLocation(), labels_);
    }
    diags_.error(loc, "template does not compile: " + std::string(text.str()));
  }

 private:
  Diagnostics& diags_;
  const std::map<std::string, std::string>& labels_;
};

bool is_cuda(const std::string& path) {
  return path.size() > 3 && (path.compare(path.size() - 3, 3, ".cu") == 0 ||
                             (path.size() > 4 && path.compare(path.size() - 4, 4, ".cuh") == 0));
}

std::vector<std::string> command_line(const ParseRequest& r) {
  const Toolchain& tc = *r.toolchain;
  std::vector<std::string> args = {"gcompile-specialize", "-fsyntax-only", "-std=c++17", "-fopenmp",
                                   "-resource-dir=" + tc.resource_dir, "-I" + r.include_root};
  for (const auto& dir : tc.include_dirs) args.push_back("-I" + dir);
  if (is_cuda(r.main_path)) {
    args.insert(args.begin() + 1, {"-x", "cuda", "--cuda-host-only", "-Wno-unknown-cuda-version", "-nocudalib",
                                   "--cuda-path=" + tc.cuda_path, "-idirafter", kCudaShimDir});
  } else {
    args.insert(args.begin() + 1, {"-x", "c++"});
  }
  args.push_back("-Wno-everything");
  args.push_back("-fno-caret-diagnostics");  // also silences Clang's "N errors generated."
  args.push_back(r.main_path);
  return args;
}

}  // namespace

bool TargetsOnlyConsumer::shouldSkipFunctionBody(clang::Decl* d) {
  return ctx_.targets.count(file_of(d->getASTContext().getSourceManager(), d->getLocation())) == 0;
}

std::string file_of(const clang::SourceManager& sm, clang::SourceLocation loc) {
  llvm::SmallString<256> path(sm.getFilename(sm.getExpansionLoc(loc)));
  llvm::sys::path::remove_dots(path, /*remove_dot_dot=*/true);
  return std::string(path.str());
}

SourceLoc to_source_loc(const clang::SourceManager& sm, clang::SourceLocation loc,
                        const std::map<std::string, std::string>& labels) {
  const clang::PresumedLoc p = sm.getPresumedLoc(sm.getFileLoc(loc));
  if (p.isInvalid()) return {};
  std::string file = p.getFilename();
  auto it = labels.find(file);
  if (it != labels.end()) file = it->second;
  return {file, static_cast<int>(p.getLine()), static_cast<int>(p.getColumn())};
}

bool run_clang(const ParseRequest& request, std::unique_ptr<clang::FrontendAction> action, Diagnostics& diags) {
  llvm::IntrusiveRefCntPtr<llvm::vfs::OverlayFileSystem> overlay(
      new llvm::vfs::OverlayFileSystem(llvm::vfs::getRealFileSystem()));
  llvm::IntrusiveRefCntPtr<llvm::vfs::InMemoryFileSystem> memory(new llvm::vfs::InMemoryFileSystem);
  overlay->pushOverlay(memory);
  for (const auto& [path, text] : request.files) {
    memory->addFile(path, 0, llvm::MemoryBuffer::getMemBufferCopy(text, path));
  }
  memory->addFile(std::string(kCudaShimDir) + "/texture_fetch_functions.h", 0,
                  llvm::MemoryBuffer::getMemBufferCopy("// empty: removed in CUDA 13\n"));
  llvm::IntrusiveRefCntPtr<clang::FileManager> files(new clang::FileManager(clang::FileSystemOptions(), overlay));
  clang::tooling::ToolInvocation invocation(command_line(request), std::move(action), files.get());
  CollectingConsumer consumer(diags, request.labels);
  invocation.setDiagnosticConsumer(&consumer);
  const std::size_t errors_before = diags.error_count();
  const bool ok = invocation.run();
  return ok && diags.error_count() == errors_before;
}

}  // namespace gc
