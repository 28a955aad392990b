// The std-expression language of init rules (and of other per-spec formulas
// such as lr multipliers and forward scales):
//
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := ('-' | '+') unary | power
//   power   := primary ('^' unary)?          (right-associative; -2^2 = -4)
//   primary := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
//
// Functions: sqrt(x), min(a, b, ...), max(a, b, ...). Names are checked
// against the variables a context allows when the expression is parsed, so a
// typo is reported at its column with a suggestion, long before evaluation.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gc::expr {

struct Node;

struct Error {
  std::size_t offset = 0;  // byte offset into the expression text
  std::string message;
};

using Bindings = std::map<std::string, double, std::less<>>;

class Expr {
 public:
  // Parses `text`; every NAME must be one of `variables`. On failure returns
  // nullopt and fills `error`.
  static std::optional<Expr> parse(std::string_view text, const std::vector<std::string>& variables,
                                   Error* error);
  // A constant expression (used when a spec gives a plain number).
  static Expr constant(double value);

  // Evaluates with the given bindings. Fails on an unbound variable, division
  // by zero, sqrt of a negative number or a non-finite result.
  std::optional<double> eval(const Bindings& bindings, std::string* error) const;

  const std::string& text() const { return text_; }
  // Variables the expression mentions, sorted and unique.
  std::vector<std::string> variables() const;
  bool is_constant() const { return variables().empty(); }

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
};

}  // namespace gc::expr
