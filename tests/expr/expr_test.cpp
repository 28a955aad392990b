// The std-expression language (compiler/expr): precedence and associativity,
// functions, parse errors with byte offsets, and evaluation errors.
//
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "expr/expr.hpp"

namespace {

using gc::expr::Bindings;
using gc::expr::Error;
using gc::expr::Expr;

const std::vector<std::string>& vars() {
  static const std::vector<std::string> v = {"d_model", "n_layers", "fan_in", "layer"};
  return v;
}
const std::string kVarList = " (variables: d_model, n_layers, fan_in, layer)";
const std::string kFunctionList = " (functions: sqrt, min, max)";

const Bindings& bindings() {
  static const Bindings b = {{"d_model", 64}, {"n_layers", 4}, {"fan_in", 256}, {"layer", 0}};
  return b;
}

// ---------------------------------------------------------------------------
// Values

struct ValueCase {
  std::string text;
  double value;
};

std::ostream& operator<<(std::ostream& out, const ValueCase& c) { return out << '"' << c.text << '"'; }

class ExprValueTest : public ::testing::TestWithParam<ValueCase> {};

TEST_P(ExprValueTest, Evaluates) {
  const ValueCase& c = GetParam();
  Error err;
  auto e = Expr::parse(c.text, vars(), &err);
  ASSERT_TRUE(e.has_value()) << "offset " << err.offset << ": " << err.message;
  EXPECT_EQ(e->text(), c.text);
  std::string message;
  auto v = e->eval(bindings(), &message);
  ASSERT_TRUE(v.has_value()) << message;
  EXPECT_DOUBLE_EQ(*v, c.value);
}

INSTANTIATE_TEST_SUITE_P(
    Expr, ExprValueTest,
    ::testing::Values(
        // precedence of + - * /
        ValueCase{"1+2*3", 7}, ValueCase{"(1+2)*3", 9}, ValueCase{"1-2-3", -4}, ValueCase{"8/4/2", 1},
        ValueCase{"2/2*3", 3}, ValueCase{"10 - 2 * 3 + 1", 5},
        // ^ binds tighter than * and unary minus, and is right-associative
        ValueCase{"2*3^2", 18}, ValueCase{"2^3^2", 512}, ValueCase{"(2^3)^2", 64}, ValueCase{"2 ^ 2 ^ 3", 256},
        ValueCase{"-2^2", -4}, ValueCase{"(-2)^2", 4}, ValueCase{"-3^2+1", -8}, ValueCase{"2^-1", 0.5},
        ValueCase{"-2^-2", -0.25}, ValueCase{"2^-2^2", 0.0625}, ValueCase{"sqrt(4)^2", 4},
        ValueCase{"2^0.5", std::sqrt(2.0)},
        // unary operators
        ValueCase{"2*-3", -6}, ValueCase{"--2", 2}, ValueCase{"+3", 3}, ValueCase{"-+-3", 3},
        ValueCase{"-d_model", -64}, ValueCase{"-sqrt(4)", -2},
        // functions
        ValueCase{"sqrt(16)", 4}, ValueCase{"sqrt(d_model)", 8}, ValueCase{"min(3, 1, 2)", 1},
        ValueCase{"max(1, 5, 2)", 5}, ValueCase{"min(4, max(1, 2))", 2}, ValueCase{"min (1, 2)", 1},
        ValueCase{"max(-1, -2)", -1},
        // numbers, variables, spacing
        ValueCase{"1e-3", 0.001}, ValueCase{".5", 0.5}, ValueCase{"2.", 2}, ValueCase{"  1 +  2 ", 3},
        ValueCase{"((1))", 1}, ValueCase{"d_model/n_layers", 16}, ValueCase{"fan_in^-0.5", 0.0625},
        ValueCase{"1/sqrt(2*n_layers)", 1 / std::sqrt(8.0)},
        ValueCase{"0.02/sqrt(2*(layer+1))", 0.02 / std::sqrt(2.0)},
        ValueCase{"1/0.5", 2}));

// ---------------------------------------------------------------------------
// Parse errors

struct ParseErrorCase {
  std::string label;
  std::string text;
  std::size_t offset;
  std::string message;
};

std::ostream& operator<<(std::ostream& out, const ParseErrorCase& c) { return out << c.label; }

class ExprParseErrorTest : public ::testing::TestWithParam<ParseErrorCase> {};

TEST_P(ExprParseErrorTest, ReportsOffsetAndMessage) {
  const ParseErrorCase& c = GetParam();
  Error err;
  auto e = Expr::parse(c.text, vars(), &err);
  EXPECT_FALSE(e.has_value()) << "parsed \"" << c.text << "\"";
  EXPECT_EQ(err.message, c.message) << "\"" << c.text << "\"";
  EXPECT_EQ(err.offset, c.offset) << "\"" << c.text << "\"";
  EXPECT_LE(err.offset, c.text.size());
}

std::vector<ParseErrorCase> parse_errors() {
  return {
      {"UnknownVariableWithSuggestion", "d_modl", 0, "unknown variable 'd_modl'; did you mean 'd_model'?" + kVarList},
      {"UnknownVariableLaterInText", "1 + n_layer", 4, "unknown variable 'n_layer'; did you mean 'n_layers'?" + kVarList},
      {"UnknownVariableNested", "max(1, sqrt(2 * fan_inn))", 16,
       "unknown variable 'fan_inn'; did you mean 'fan_in'?" + kVarList},
      {"UnknownVariableWithoutSuggestion", "foo", 0, "unknown variable 'foo'" + kVarList},
      {"InfIsNotANumber", "inf", 0, "unknown variable 'inf'" + kVarList},
      {"NanIsNotANumber", "1 + nan", 4, "unknown variable 'nan'" + kVarList},
      {"UnknownFunction", "log(2)", 0, "unknown function 'log'" + kFunctionList},
      {"UnknownFunctionWithSuggestion", "2 * sqr(2)", 4, "unknown function 'sqr'; did you mean 'sqrt'?" + kFunctionList},
      {"FunctionsAreCaseSensitive", "Sqrt(4)", 0, "unknown function 'Sqrt'; did you mean 'sqrt'?" + kFunctionList},
      {"VariableCalledAsFunction", "d_model(2)", 0, "unknown function 'd_model'" + kFunctionList},
      {"FunctionWithoutParentheses", "sqrt", 0, "function 'sqrt' needs arguments in parentheses"},
      {"FunctionUsedAsValue", "1 + min", 4, "function 'min' needs arguments in parentheses"},
      {"UnbalancedOpenParen", "(1+2", 0, "unbalanced '(': no matching ')'"},
      {"UnbalancedInnerParen", "2*(1+(2)", 2, "unbalanced '(': no matching ')'"},
      {"UnbalancedCall", "min(1,2", 3, "unbalanced '(' in call to min: no matching ')'"},
      {"UnbalancedCallWithNestedParen", "max(1,(2)", 3, "unbalanced '(' in call to max: no matching ')'"},
      {"UnbalancedCloseParen", "1+2)", 3, "unexpected ')'"},
      {"TrailingNumber", "1 2", 2, "unexpected '2'"},
      {"TrailingName", "2 n_layers", 2, "unexpected 'n'"},
      {"TrailingComma", "1,2", 1, "unexpected ','"},
      {"TrailingComment", "1 # 2", 2, "unexpected '#'"},
      {"Empty", "", 0, "empty expression"},
      {"OnlySpaces", "   ", 3, "expression ends where a value was expected"},
      {"DanglingOperator", "1 +", 3, "expression ends where a value was expected"},
      {"DanglingPower", "2^", 2, "expression ends where a value was expected"},
      {"DanglingTimesAfterName", "d_model*", 8, "expression ends where a value was expected"},
      {"LeadingBinaryOperator", "*2", 0, "unexpected '*' where a value was expected"},
      {"EmptyParens", "()", 1, "unexpected ')' where a value was expected"},
      {"EmptyArgument", "min(,)", 4, "unexpected ',' where a value was expected"},
      {"NumberGluedToName", "2n", 0, "malformed number '2n' (write '*' between a number and a name)"},
      {"NumberGluedToVariable", "0.02 / 2n_layers", 7, "malformed number '2n' (write '*' between a number and a name)"},
      {"IncompleteExponent", "1.5e", 0, "malformed number '1.5e' (write '*' between a number and a name)"},
      {"LoneDot", ".", 0, "malformed number"},
      {"TwoDots", "1..2", 2, "unexpected '.'"},
      {"SqrtWithoutArguments", "sqrt()", 0, "sqrt takes 1 argument, got 0"},
      {"SqrtWithTwoArguments", "sqrt(1, 2)", 0, "sqrt takes 1 argument, got 2"},
      {"MinWithOneArgument", "1 + min(1)", 4, "min takes at least 2 arguments, got 1"},
      {"MaxWithoutArguments", "max()", 0, "max takes at least 2 arguments, got 0"},
      // Regression (was wrong before): numbers are read with strtod, which also accepts hexadecimal ("0x10" = 16, and
      // "0x1p3" = 8). The grammar's NUMBER is decimal; "0x" should be a malformed number.
      {"HexadecimalNumber", "0x10", 0, "malformed number '0x' (write '*' between a number and a name)"},
      // Regression (was wrong before): the error quotes one byte of the two-byte character 'γ' ("unexpected '\xCE'"), an
      // invalid UTF-8 message.
      {"NonAsciiCharacterQuotedWhole", "γ + 1", 0, "unexpected 'γ' where a value was expected"},
      // Regression (was wrong before): same, after a value (trailing-garbage path).
      {"TrailingNonAsciiCharacterQuotedWhole", "2 ε", 2, "unexpected 'ε'"},
  };
}

INSTANTIATE_TEST_SUITE_P(Expr, ExprParseErrorTest, ::testing::ValuesIn(parse_errors()),
                         [](const ::testing::TestParamInfo<ParseErrorCase>& info) { return info.param.label; });

TEST(ExprTest, ParseFailureWithoutErrorOutputDoesNotCrash) {
  EXPECT_FALSE(Expr::parse("(", vars(), nullptr).has_value());
  EXPECT_FALSE(Expr::parse("", vars(), nullptr).has_value());
}

TEST(ExprTest, NoVariablesAllowed) {
  Error err;
  EXPECT_FALSE(Expr::parse("d_model", {}, &err).has_value());
  EXPECT_EQ(err.offset, 0u);
  EXPECT_EQ(err.message.rfind("unknown variable 'd_model'", 0), 0u) << err.message;
  auto e = Expr::parse("2 * sqrt(2)", {}, &err);
  ASSERT_TRUE(e.has_value());
  EXPECT_DOUBLE_EQ(*e->eval({}, nullptr), 2 * std::sqrt(2.0));
}

// ---------------------------------------------------------------------------
// Evaluation errors

struct EvalErrorCase {
  std::string label;
  std::string text;
  std::string message;
};

std::ostream& operator<<(std::ostream& out, const EvalErrorCase& c) { return out << c.label; }

class ExprEvalErrorTest : public ::testing::TestWithParam<EvalErrorCase> {};

TEST_P(ExprEvalErrorTest, FailsWithMessage) {
  const EvalErrorCase& c = GetParam();
  Error err;
  auto e = Expr::parse(c.text, vars(), &err);
  ASSERT_TRUE(e.has_value()) << err.message;
  std::string message;
  auto v = e->eval(bindings(), &message);
  EXPECT_FALSE(v.has_value()) << "= " << *v;
  EXPECT_EQ(message, c.message);
  EXPECT_FALSE(e->eval(bindings(), nullptr).has_value());  // no error output: no crash
}

INSTANTIATE_TEST_SUITE_P(
    Expr, ExprEvalErrorTest,
    ::testing::Values(EvalErrorCase{"DivisionByZero", "1/0", "division by zero"},
                      EvalErrorCase{"DivisionByZeroVariable", "1/(layer)", "division by zero"},
                      EvalErrorCase{"DivisionByComputedZero", "d_model/(n_layers - 4)", "division by zero"},
                      EvalErrorCase{"DivisionByNegativeZero", "1/-0", "division by zero"},
                      EvalErrorCase{"DivisionByZeroInsideCall", "min(1, 1/0)", "division by zero"},
                      EvalErrorCase{"SqrtOfNegative", "sqrt(-1)", "sqrt of a negative number (-1)"},
                      EvalErrorCase{"SqrtOfComputedNegative", "sqrt(layer - 0.5)", "sqrt of a negative number (-0.5)"},
                      EvalErrorCase{"PowerOverflow", "10^400", "result is not a finite number"},
                      EvalErrorCase{"ProductOverflow", "1e308*10", "result is not a finite number"},
                      EvalErrorCase{"ZeroToNegativePower", "0^-1", "result is not a finite number"},
                      EvalErrorCase{"NegativeBaseFractionalPower", "(-8)^(1/3)", "result is not a finite number"},
                      EvalErrorCase{"LiteralOverflow", "1e400", "result is not a finite number"},
                      EvalErrorCase{"FanInPowerOverflow", "fan_in^1000", "result is not a finite number"}),
    [](const ::testing::TestParamInfo<EvalErrorCase>& info) { return info.param.label; });

TEST(ExprTest, UnboundVariableFailsAtEvaluation) {
  Error err;
  auto e = Expr::parse("2 * width", {"width"}, &err);
  ASSERT_TRUE(e.has_value());
  std::string message;
  EXPECT_FALSE(e->eval({}, &message).has_value());
  EXPECT_EQ(message, "variable 'width' has no value here");
  EXPECT_DOUBLE_EQ(*e->eval({{"width", 3}}, &message), 6);
}

// ---------------------------------------------------------------------------
// Other API

TEST(ExprTest, VariablesAreSortedAndUnique) {
  auto e = Expr::parse("fan_in * d_model + d_model / (layer + 1) + 2", vars(), nullptr);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->variables(), (std::vector<std::string>{"d_model", "fan_in", "layer"}));
  EXPECT_FALSE(e->is_constant());
}

TEST(ExprTest, ConstantExpressions) {
  auto e = Expr::parse("2 * sqrt(2) + max(1, 2)", vars(), nullptr);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->is_constant());
  EXPECT_TRUE(e->variables().empty());

  const Expr c = Expr::constant(0.02);
  EXPECT_EQ(c.text(), "0.02");
  EXPECT_TRUE(c.is_constant());
  EXPECT_EQ(c.eval({}, nullptr), std::optional<double>(0.02));
}

TEST(ExprTest, KeepsItsTextVerbatim) {
  auto e = Expr::parse("  0.02 / sqrt( 2*n_layers )  ", vars(), nullptr);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->text(), "  0.02 / sqrt( 2*n_layers )  ");
}

TEST(ExprTest, CopiesShareTheParsedTree) {
  auto e = Expr::parse("d_model * 2", vars(), nullptr);
  ASSERT_TRUE(e.has_value());
  const Expr copy = *e;
  e.reset();
  EXPECT_EQ(copy.eval(bindings(), nullptr), std::optional<double>(128));
}

}  // namespace
