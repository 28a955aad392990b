// Pass 1: knobs. A knob is `constexpr T k = gc::knob<T>("spec.key", default);`
// and becomes `constexpr T k = <literal of the spec value>;`.
#include <climits>
#include <cmath>

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Lex/Lexer.h>
#include <clang/Lex/PPCallbacks.h>
#include <clang/Lex/Preprocessor.h>

#include "common/text.hpp"
#include "specialize/clang_tool.hpp"
#include "specialize/passes.hpp"

namespace gc {

namespace {

std::string float_literal(double v, bool is_float) {
  std::string s = format_double(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return is_float ? s + "f" : s;
}

std::string describe(const Value& v) {
  return v.kind == Value::Kind::list ? "an array" : "the " + v.type_name() + " " + v.to_toml();
}

class KnobVisitor : public clang::RecursiveASTVisitor<KnobVisitor> {
 public:
  KnobVisitor(clang::ASTContext& ast, PassContext& ctx) : ast_(ast), sm_(ast.getSourceManager()), ctx_(ctx) {}

  bool VisitVarDecl(clang::VarDecl* var) {
    if (!var->hasInit()) return true;
    const auto* call = llvm::dyn_cast<clang::CallExpr>(var->getInit()->IgnoreImplicit()->IgnoreParens());
    if (!call) return true;
    const clang::FunctionDecl* callee = call->getDirectCallee();
    if (!callee || callee->getQualifiedNameAsString() != "gc::knob") return true;
    const std::string file = file_of(sm_, call->getBeginLoc());
    if (!ctx_.targets.count(file)) return true;
    const SourceLoc where = to_source_loc(sm_, call->getBeginLoc(), *ctx_.labels);
    if (!var->isConstexpr()) {
      ctx_.diags->error(where, "knob '" + var->getNameAsString() + "' must be declared constexpr");
      return true;
    }
    const auto* key_literal = call->getNumArgs() == 2
                                  ? llvm::dyn_cast<clang::StringLiteral>(call->getArg(0)->IgnoreParenImpCasts())
                                  : nullptr;
    if (!key_literal) {
      ctx_.diags->error(where, "gc::knob needs a string literal key and a default value");
      return true;
    }
    const std::string key = key_literal->getString().str();
    auto it = ctx_.knobs->find(key);
    if (it == ctx_.knobs->end()) {
      std::vector<std::string> keys;
      for (const auto& entry : *ctx_.knobs) keys.push_back(entry.first);
      ctx_.diags->error(to_source_loc(sm_, key_literal->getBeginLoc(), *ctx_.labels),
                        "knob key '" + key + "' is not bound by the plan" + did_you_mean(key, keys));
      return true;
    }
    std::string literal;
    if (!literal_for(var->getType().getUnqualifiedType().getCanonicalType(), key, it->second, where, literal)) {
      return true;
    }
    ctx_.used_knobs.insert(key);
    const clang::CharSourceRange range = clang::CharSourceRange::getTokenRange(call->getSourceRange());
    Edit e;
    e.begin = sm_.getFileOffset(range.getBegin());
    e.end = sm_.getFileOffset(clang::Lexer::getLocForEndOfToken(range.getEnd(), 0, sm_, ast_.getLangOpts()));
    e.text = literal;
    ctx_.edits[file].push_back(std::move(e));
    return true;
  }

 private:
  bool mismatch(const std::string& key, const std::string& type, const Value& v, const SourceLoc& where) {
    ctx_.diags->error(where, "knob '" + key + "' has C++ type " + type + ", which cannot hold " + describe(v));
    return false;
  }

  bool literal_for(clang::QualType type, const std::string& key, const Value& v, const SourceLoc& where,
                   std::string& out) {
    const std::string type_name = type.getAsString(ast_.getPrintingPolicy());
    if (type->isBooleanType()) {
      if (v.kind != Value::Kind::boolean) return mismatch(key, type_name, v, where);
      out = v.b ? "true" : "false";
      return true;
    }
    if (const auto* enum_type = type->getAs<clang::EnumType>()) {
      if (v.kind != Value::Kind::string) return mismatch(key, type_name, v, where);
      const clang::EnumDecl* decl = enum_type->getDecl();
      for (const auto* e : decl->enumerators()) {
        if (e->getName() == v.s) {
          out = decl->getQualifiedNameAsString() + "::" + v.s;
          return true;
        }
      }
      ctx_.diags->error(where, "knob '" + key + "': enum " + decl->getQualifiedNameAsString() +
                                   " has no enumerator '" + v.s + "'");
      return false;
    }
    if (type->isIntegerType()) {
      if (v.kind != Value::Kind::integer) return mismatch(key, type_name, v, where);
      const unsigned bits = ast_.getIntWidth(type);
      const bool is_signed = type->isSignedIntegerType();
      const long double hi = is_signed ? std::ldexp(1.0L, int(bits) - 1) - 1 : std::ldexp(1.0L, int(bits)) - 1;
      const long double lo = is_signed ? -std::ldexp(1.0L, int(bits) - 1) : 0;
      if (static_cast<long double>(v.i) > hi || static_cast<long double>(v.i) < lo) {
        ctx_.diags->error(where, "knob '" + key + "' has C++ type " + type_name + ", too narrow for " + std::to_string(v.i));
        return false;
      }
      out = std::to_string(v.i);
      return true;
    }
    if (type->isRealFloatingType()) {
      if (v.kind != Value::Kind::number && v.kind != Value::Kind::integer) return mismatch(key, type_name, v, where);
      const bool is_float = type->isSpecificBuiltinType(clang::BuiltinType::Float);
      out = float_literal(v.as_double(), is_float);
      return true;
    }
    if (type->isPointerType() && type->getPointeeType()->isCharType()) {
      if (v.kind != Value::Kind::string) return mismatch(key, type_name, v, where);
      out = cpp_string_literal(v.s);
      return true;
    }
    ctx_.diags->error(where, "knob '" + key + "' has unsupported C++ type " + type_name +
                                 " (use bool, an integer, float, double, an enum or const char*)");
    return false;
  }

  clang::ASTContext& ast_;
  clang::SourceManager& sm_;
  PassContext& ctx_;
};

// Records the `#include "gc/knob.hpp"` lines of the target files for removal.
class KnobIncludeFinder : public clang::PPCallbacks {
 public:
  KnobIncludeFinder(clang::SourceManager& sm, PassContext& ctx) : sm_(sm), ctx_(ctx) {}

  void InclusionDirective(clang::SourceLocation hash, const clang::Token&, llvm::StringRef file_name, bool,
                          clang::CharSourceRange filename_range, clang::OptionalFileEntryRef, llvm::StringRef,
                          llvm::StringRef, const clang::Module*, bool, clang::SrcMgr::CharacteristicKind) override {
    const std::string file = file_of(sm_, hash);
    if (!ctx_.targets.count(file) || file_name != "gc/knob.hpp") return;
    Edit e;
    e.begin = sm_.getFileOffset(hash);
    e.end = sm_.getFileOffset(filename_range.getEnd());
    const llvm::StringRef buffer = sm_.getBufferData(sm_.getFileID(hash));
    if (e.end < buffer.size() && buffer[e.end] == '\n') ++e.end;  // the whole line
    ctx_.edits[file].push_back(std::move(e));
  }

 private:
  clang::SourceManager& sm_;
  PassContext& ctx_;
};

class KnobConsumer : public TargetsOnlyConsumer {
 public:
  explicit KnobConsumer(PassContext& ctx) : TargetsOnlyConsumer(ctx), ctx_(ctx) {}
  void HandleTranslationUnit(clang::ASTContext& ast) override {
    KnobVisitor visitor(ast, ctx_);
    visitor.TraverseDecl(ast.getTranslationUnitDecl());
  }

 private:
  PassContext& ctx_;
};

class KnobAction : public clang::ASTFrontendAction {
 public:
  explicit KnobAction(PassContext& ctx) : ctx_(ctx) {}
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& ci, llvm::StringRef) override {
    ci.getPreprocessor().addPPCallbacks(std::make_unique<KnobIncludeFinder>(ci.getSourceManager(), ctx_));
    ci.getFrontendOpts().SkipFunctionBodies = true;  // outside the targets (TargetsOnlyConsumer)
    return std::make_unique<KnobConsumer>(ctx_);
  }

 private:
  PassContext& ctx_;
};

}  // namespace

std::unique_ptr<clang::FrontendAction> make_knob_action(PassContext& ctx) { return std::make_unique<KnobAction>(ctx); }

}  // namespace gc
