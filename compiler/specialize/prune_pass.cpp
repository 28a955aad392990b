// Pass 2: pruning. An `if constexpr` whose condition is a constant once the
// knobs are literals is replaced by the branch that runs (or by nothing).
// Edits for nested statements are kept and applied recursively, so else-if
// chains and nested conditions resolve in one parse.
#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/ParentMapContext.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Lex/Lexer.h>

#include "specialize/clang_tool.hpp"
#include "specialize/passes.hpp"

namespace gc {

namespace {

class PruneVisitor : public clang::RecursiveASTVisitor<PruneVisitor> {
 public:
  PruneVisitor(clang::ASTContext& ast, PassContext& ctx) : ast_(ast), sm_(ast.getSourceManager()), ctx_(ctx) {}

  bool VisitIfStmt(clang::IfStmt* s) {
    if (!s->isConstexpr() || s->getInit() || s->getConditionVariable()) return true;
    if (s->getBeginLoc().isMacroID()) return true;
    const std::string file = file_of(sm_, s->getBeginLoc());
    if (!ctx_.targets.count(file)) return true;
    const clang::Expr* cond = s->getCond();
    if (cond->isValueDependent() || cond->isInstantiationDependent()) return true;  // decided per instantiation
    bool taken = false;
    if (!cond->EvaluateAsBooleanCondition(taken, ast_)) return true;
    // Braced branches keep pruning exact (an unbraced one leaves its ';').
    for (const clang::Stmt* b : {s->getThen(), s->getElse()}) {
      if (b && !llvm::isa<clang::CompoundStmt>(b) && !llvm::isa<clang::IfStmt>(b)) {
        ctx_.diags->error(to_source_loc(sm_, b->getBeginLoc(), *ctx_.labels),
                          "brace this branch of `if constexpr`: templates brace every branch so the specializer can "
                          "remove it cleanly");
        return true;
      }
    }

    Edit e;
    e.begin = offset(s->getBeginLoc());
    e.end = end_offset(s->getEndLoc());
    const clang::Stmt* branch = taken ? s->getThen() : s->getElse();
    if (!branch) {
      // Nothing runs. A statement that is the body of a loop or another if
      // needs something in its place.
      e.text = is_in_compound(s) ? "" : "{}";
    } else if (const auto* block = llvm::dyn_cast<clang::CompoundStmt>(branch); block && !declares_names(block)) {
      e.keep_range = true;  // splice the block's statements into the enclosing scope
      e.keep_begin = offset(block->getLBracLoc()) + 1;
      e.keep_end = offset(block->getRBracLoc());
    } else {
      e.keep_range = true;  // an else-if (resolved by its own edit) or a block that scopes names
      e.keep_begin = offset(branch->getBeginLoc());
      e.keep_end = end_offset(branch->getEndLoc());
    }
    ctx_.edits[file].push_back(std::move(e));
    return true;
  }

 private:
  std::size_t offset(clang::SourceLocation loc) const { return sm_.getFileOffset(sm_.getExpansionLoc(loc)); }
  std::size_t end_offset(clang::SourceLocation loc) const {
    return offset(clang::Lexer::getLocForEndOfToken(sm_.getExpansionLoc(loc), 0, sm_, ast_.getLangOpts()));
  }

  // Splicing a block that declares variables could clash with names in the
  // enclosing scope; such blocks keep their braces.
  static bool declares_names(const clang::CompoundStmt* block) {
    for (const clang::Stmt* child : block->body()) {
      if (llvm::isa<clang::DeclStmt>(child)) return true;
    }
    return false;
  }

  bool is_in_compound(const clang::IfStmt* s) {
    for (const auto& parent : ast_.getParents(*s)) {
      if (parent.get<clang::CompoundStmt>()) return true;
    }
    return false;
  }

  clang::ASTContext& ast_;
  clang::SourceManager& sm_;
  PassContext& ctx_;
};

class PruneConsumer : public TargetsOnlyConsumer {
 public:
  explicit PruneConsumer(PassContext& ctx) : TargetsOnlyConsumer(ctx), ctx_(ctx) {}
  void HandleTranslationUnit(clang::ASTContext& ast) override {
    PruneVisitor visitor(ast, ctx_);
    visitor.TraverseDecl(ast.getTranslationUnitDecl());
  }

 private:
  PassContext& ctx_;
};

class PruneAction : public clang::ASTFrontendAction {
 public:
  explicit PruneAction(PassContext& ctx) : ctx_(ctx) {}
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& ci, llvm::StringRef) override {
    ci.getFrontendOpts().SkipFunctionBodies = true;  // outside the targets (TargetsOnlyConsumer)
    return std::make_unique<PruneConsumer>(ctx_);
  }

 private:
  PassContext& ctx_;
};

}  // namespace

std::unique_ptr<clang::FrontendAction> make_prune_action(PassContext& ctx) { return std::make_unique<PruneAction>(ctx); }

}  // namespace gc
