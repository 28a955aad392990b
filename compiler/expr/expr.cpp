#include "expr/expr.hpp"

#include <cctype>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "common/text.hpp"

namespace gc::expr {

struct Node {
  enum class Kind { number, variable, negate, add, subtract, multiply, divide, power, call };
  Kind kind = Kind::number;
  double value = 0.0;
  std::string name;  // variable or function name
  std::size_t offset = 0;
  std::vector<std::shared_ptr<const Node>> args;
};

namespace {

using NodePtr = std::shared_ptr<const Node>;

const std::vector<std::string>& function_names() {
  static const std::vector<std::string> names = {"sqrt", "min", "max"};
  return names;
}

class Parser {
 public:
  Parser(std::string_view text, const std::vector<std::string>& variables)
      : text_(text), variables_(variables) {}

  NodePtr parse_all(Error* error) {
    NodePtr root = parse_expr();
    if (!failed_) {
      skip_space();
      if (pos_ < text_.size()) fail(pos_, "unexpected '" + utf8_char_at(text_, pos_) + "'");
    }
    if (failed_) {
      if (error) *error = error_;
      return nullptr;
    }
    return root;
  }

 private:
  void fail(std::size_t at, std::string message) {
    if (failed_) return;
    failed_ = true;
    error_ = {at, std::move(message)};
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  static NodePtr make(Node::Kind kind, std::size_t offset, std::vector<NodePtr> args) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->offset = offset;
    n->args = std::move(args);
    return n;
  }

  NodePtr parse_expr() {
    NodePtr lhs = parse_term();
    while (!failed_) {
      skip_space();
      const std::size_t at = pos_;
      if (accept('+')) {
        lhs = make(Node::Kind::add, at, {lhs, parse_term()});
      } else if (accept('-')) {
        lhs = make(Node::Kind::subtract, at, {lhs, parse_term()});
      } else {
        break;
      }
    }
    return lhs;
  }

  NodePtr parse_term() {
    NodePtr lhs = parse_unary();
    while (!failed_) {
      skip_space();
      const std::size_t at = pos_;
      if (accept('*')) {
        lhs = make(Node::Kind::multiply, at, {lhs, parse_unary()});
      } else if (accept('/')) {
        lhs = make(Node::Kind::divide, at, {lhs, parse_unary()});
      } else {
        break;
      }
    }
    return lhs;
  }

  NodePtr parse_unary() {
    skip_space();
    const std::size_t at = pos_;
    if (accept('-')) return make(Node::Kind::negate, at, {parse_unary()});
    if (accept('+')) return parse_unary();
    return parse_power();
  }

  NodePtr parse_power() {
    NodePtr base = parse_primary();
    skip_space();
    const std::size_t at = pos_;
    if (!failed_ && accept('^')) return make(Node::Kind::power, at, {base, parse_unary()});
    return base;
  }

  NodePtr parse_primary() {
    skip_space();
    if (failed_) return nullptr;
    if (pos_ >= text_.size()) {
      fail(pos_, text_.empty() ? "empty expression" : "expression ends where a value was expected");
      return nullptr;
    }
    const char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return parse_number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return parse_name();
    if (c == '(') {
      const std::size_t open = pos_++;
      NodePtr inner = parse_expr();
      if (!failed_ && !accept(')')) fail(open, "unbalanced '(': no matching ')'");
      return inner;
    }
    fail(pos_, "unexpected '" + utf8_char_at(text_, pos_) + "' where a value was expected");
    return nullptr;
  }

  // NUMBER := digits ['.' digits] [('e' | 'E') ['+' | '-'] digits], or '.' digits ...
  // (decimal only: no hexadecimal, inf or nan).
  NodePtr parse_number() {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      return pos_ - from;
    };
    std::size_t mantissa = digits();
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      mantissa += digits();
    }
    if (mantissa == 0) {
      fail(start, "malformed number");
      return nullptr;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      const std::size_t save = pos_++;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) pos_ = save;  // "2e" is 2 followed by a name
    }
    if ((pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))) {
      const std::size_t shown = std::min(text_.size(), pos_ + 1);
      fail(start, "malformed number '" + std::string(text_.substr(start, shown - start)) +
                      "' (write '*' between a number and a name)");
      return nullptr;
    }
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::number;
    n->value = std::strtod(std::string(text_.substr(start, pos_ - start)).c_str(), nullptr);
    n->offset = start;
    return n;
  }

  NodePtr parse_name() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    const std::string name(text_.substr(start, pos_ - start));
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '(') return parse_call(name, start);

    bool known = false;
    for (const auto& v : variables_) known = known || v == name;
    if (!known) {
      bool is_function = false;
      for (const auto& f : function_names()) is_function = is_function || f == name;
      if (is_function) {
        fail(start, "function '" + name + "' needs arguments in parentheses");
      } else {
        fail(start, "unknown variable '" + name + "'" + did_you_mean(name, variables_) +
                        " (variables: " + join(variables_, ", ") + ")");
      }
      return nullptr;
    }
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::variable;
    n->name = name;
    n->offset = start;
    return n;
  }

  NodePtr parse_call(const std::string& name, std::size_t start) {
    bool known = false;
    for (const auto& f : function_names()) known = known || f == name;
    if (!known) {
      fail(start, "unknown function '" + name + "'" + did_you_mean(name, function_names()) +
                      " (functions: sqrt, min, max)");
      return nullptr;
    }
    const std::size_t open = pos_++;
    std::vector<NodePtr> args;
    if (!accept(')')) {
      do {
        args.push_back(parse_expr());
      } while (!failed_ && accept(','));
      if (!failed_ && !accept(')')) fail(open, "unbalanced '(' in call to " + name + ": no matching ')'");
    }
    if (failed_) return nullptr;
    if (name == "sqrt" && args.size() != 1) {
      fail(start, "sqrt takes 1 argument, got " + std::to_string(args.size()));
      return nullptr;
    }
    if ((name == "min" || name == "max") && args.size() < 2) {
      fail(start, name + " takes at least 2 arguments, got " + std::to_string(args.size()));
      return nullptr;
    }
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::call;
    n->name = name;
    n->offset = start;
    n->args = std::move(args);
    return n;
  }

  std::string_view text_;
  const std::vector<std::string>& variables_;
  std::size_t pos_ = 0;
  bool failed_ = false;
  Error error_;
};

std::optional<double> evaluate(const Node& n, const Bindings& b, std::string* error) {
  auto fail = [&](std::string message) -> std::optional<double> {
    if (error) *error = std::move(message);
    return std::nullopt;
  };
  std::vector<double> a;
  for (const auto& arg : n.args) {
    auto v = evaluate(*arg, b, error);
    if (!v) return std::nullopt;
    a.push_back(*v);
  }
  double r = 0.0;
  switch (n.kind) {
    case Node::Kind::number: r = n.value; break;
    case Node::Kind::variable: {
      auto it = b.find(n.name);
      if (it == b.end()) return fail("variable '" + n.name + "' has no value here");
      r = it->second;
      break;
    }
    case Node::Kind::negate: r = -a[0]; break;
    case Node::Kind::add: r = a[0] + a[1]; break;
    case Node::Kind::subtract: r = a[0] - a[1]; break;
    case Node::Kind::multiply: r = a[0] * a[1]; break;
    case Node::Kind::divide:
      if (a[1] == 0.0) return fail("division by zero");
      r = a[0] / a[1];
      break;
    case Node::Kind::power: r = std::pow(a[0], a[1]); break;
    case Node::Kind::call:
      if (n.name == "sqrt") {
        if (a[0] < 0.0) return fail("sqrt of a negative number (" + format_double(a[0]) + ")");
        r = std::sqrt(a[0]);
      } else if (n.name == "min") {
        r = a[0];
        for (double x : a) r = std::min(r, x);
      } else {
        r = a[0];
        for (double x : a) r = std::max(r, x);
      }
      break;
  }
  if (!std::isfinite(r)) return fail("result is not a finite number");
  return r;
}

void collect_variables(const Node& n, std::set<std::string>& out) {
  if (n.kind == Node::Kind::variable) out.insert(n.name);
  for (const auto& a : n.args) collect_variables(*a, out);
}

}  // namespace

std::optional<Expr> Expr::parse(std::string_view text, const std::vector<std::string>& variables,
                                Error* error) {
  Parser parser(text, variables);
  NodePtr root = parser.parse_all(error);
  if (!root) return std::nullopt;
  Expr e;
  e.text_ = std::string(text);
  e.root_ = std::move(root);
  return e;
}

Expr Expr::constant(double value) {
  auto n = std::make_shared<Node>();
  n->kind = Node::Kind::number;
  n->value = value;
  Expr e;
  e.text_ = format_double(value);
  e.root_ = std::move(n);
  return e;
}

std::optional<double> Expr::eval(const Bindings& bindings, std::string* error) const {
  if (!root_) {
    if (error) *error = "empty expression";
    return std::nullopt;
  }
  return evaluate(*root_, bindings, error);
}

std::vector<std::string> Expr::variables() const {
  std::set<std::string> names;
  if (root_) collect_variables(*root_, names);
  return {names.begin(), names.end()};
}

}  // namespace gc::expr
