// Hostile strings: experiment names that would escape or corrupt the output
// directory, descriptions with control characters, bidi overrides or invalid
// UTF-8 (all rejected with exact messages), exotic but valid descriptions
// (accepted), and the escaping functions that write user strings into C++,
// TOML and HTML (checked without compiling anything).
//
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "common/text.hpp"
#include "test_util.hpp"

namespace {

using Strings = std::vector<std::string>;

// The minimal spec with `name = <name_toml>` on line 2 (value at column 8).
std::string spec_with_name(const std::string& name_toml) {
  std::string s = gc::test::minimal_spec_sections();
  s.replace(s.find("name = \"t\""), 10, "name = " + name_toml);
  return s;
}

// The minimal spec with `description = <toml>` on line 3 (value at column 15).
std::string spec_with_description(const std::string& description_toml) {
  std::string s = gc::test::minimal_spec_sections();
  s.replace(s.find("name = \"t\""), 10, "name = \"t\"\ndescription = " + description_toml);
  return s;
}

Strings load_messages(const std::string& text, std::optional<gc::Spec>* out = nullptr) {
  gc::Diagnostics diags;
  auto spec = gc::test::spec_from(text, diags);
  if (out) *out = std::move(spec);
  return gc::test::messages(diags);
}

// ---------------------------------------------------------------------------
// experiment.name

struct NameCase {
  std::string label;
  std::string toml;  // right-hand side as written in the spec
  std::string problem;
};

std::ostream& operator<<(std::ostream& out, const NameCase& c) { return out << c.label; }

const std::string kOnly = "may contain only a-z, 0-9, '_', '.' and '-' ";

std::vector<NameCase> bad_names() {
  return {
      {"ParentDirectory", "\"../x\"", kOnly + "(found '/' at position 3)"},
      {"DotDotAlone", "\"..\"", "must not start with '.' or '-'"},
      {"Slash", "\"a/b\"", kOnly + "(found '/' at position 2)"},
      {"AbsolutePath", "\"/etc\"", kOnly + "(found '/' at position 1)"},
      {"Backslash", "\"a\\\\b\"", kOnly + "(found '\\' at position 2)"},
      {"Uppercase", "\"Abc\"", kOnly + "(found 'A' at position 1)"},
      {"Space", "\"a b\"", kOnly + "(found ' ' at position 2)"},
      {"DoubleQuote", "\"a\\\"b\"", kOnly + "(found '\"' at position 2)"},
      {"SingleQuote", "\"a'b\"", kOnly + "(found ''' at position 2)"},
      {"Newline", "\"a\\nb\"", kOnly + "(found byte 0x0A at position 2)"},
      {"Tab", "\"a\\tb\"", kOnly + "(found byte 0x09 at position 2)"},
      {"NulByte", "\"a\\u0000b\"", kOnly + "(found byte 0x00 at position 2)"},
      {"Del", "\"a\\u007Fb\"", kOnly + "(found byte 0x7F at position 2)"},
      {"SixtyFiveCharacters", "\"" + std::string(65, 'a') + "\"", "must be at most 64 characters (got 65)"},
      {"LeadingDot", "\".hidden\"", "must not start with '.' or '-'"},
      {"LeadingDash", "\"-rf\"", "must not start with '.' or '-'"},
      {"Empty", "\"\"", "must not be empty"},
      {"Unicode", "\"café\"", kOnly + "(found byte 0xC3 at position 4)"},
      {"UnicodeEscape", "\"\\u00e9t\\u00e9\"", kOnly + "(found byte 0xC3 at position 1)"},
      {"Emoji", "\"run🎉\"", kOnly + "(found byte 0xF0 at position 4)"},
      {"BidiOverride", "\"a\\u202Eb\"", kOnly + "(found byte 0xE2 at position 2)"},
      {"ShellMetacharacters", "\"x;rm\"", kOnly + "(found ';' at position 2)"},
      {"Glob", "\"x*\"", kOnly + "(found '*' at position 2)"},
      {"Tilde", "\"~x\"", kOnly + "(found '~' at position 1)"},
      {"LiteralString", "'a\\b'", kOnly + "(found '\\' at position 2)"},
  };
}

class BadNameTest : public ::testing::TestWithParam<NameCase> {};

TEST_P(BadNameTest, IsRejected) {
  const NameCase& c = GetParam();
  std::optional<gc::Spec> spec;
  EXPECT_EQ(load_messages(spec_with_name(c.toml), &spec),
            (Strings{"spec.toml:2:8: error: 'experiment.name' " + c.problem}));
  EXPECT_FALSE(spec.has_value());
}

INSTANTIATE_TEST_SUITE_P(Hostile, BadNameTest, ::testing::ValuesIn(bad_names()),
                         [](const ::testing::TestParamInfo<NameCase>& info) { return info.param.label; });

TEST(HostileNameTest, SafeNamesAreAccepted) {
  const std::vector<std::string> names = {"a",         "moe_3b_gamma1", "x.y-z", "0", "a..b",
                                         "trailing.", "trailing-",     std::string(64, 'z')};
  for (const std::string& name : names) {
    std::optional<gc::Spec> spec;
    EXPECT_EQ(load_messages(spec_with_name("\"" + name + "\""), &spec), Strings{}) << name;
    ASSERT_TRUE(spec.has_value()) << name;
    EXPECT_EQ(spec->experiment.name, name);
  }
}

// ---------------------------------------------------------------------------
// experiment.description

struct DescriptionCase {
  std::string label;
  std::string toml;
  std::string expected;  // the full diagnostic
};

std::ostream& operator<<(std::ostream& out, const DescriptionCase& c) { return out << c.label; }

std::string unsafe_at(int byte) {
  return "spec.toml:3:15: error: 'experiment.description' contains a control character or invalid UTF-8 at byte " +
         std::to_string(byte);
}

std::vector<DescriptionCase> bad_descriptions() {
  return {
      {"Bell", "\"a\\u0007b\"", unsafe_at(2)},
      {"AnsiEscape", "\"a\\u001b[31mred\"", unsafe_at(2)},
      {"CarriageReturn", "\"a\\rb\"", unsafe_at(2)},
      {"CrLf", "\"a\\r\\nb\"", unsafe_at(2)},
      {"Backspace", "\"abc\\b\"", unsafe_at(4)},
      {"FormFeed", "\"\\f\"", unsafe_at(1)},
      {"Nul", "\"a\\u0000b\"", unsafe_at(2)},
      {"Del", "\"a\\u007Fb\"", unsafe_at(2)},
      {"C1Control", "\"a\\u0085b\"", unsafe_at(2)},
      {"C1ControlRawUtf8", "\"a\u0085b\"", unsafe_at(2)},
      {"BidiOverrideEscaped", "\"abc\\u202Edef\"", unsafe_at(4)},
      {"BidiOverrideRaw", "\"abc\u202edef\"", unsafe_at(4)},
      {"BidiEmbedding", "\"\\u202Ax\"", unsafe_at(1)},
      {"BidiIsolate", "\"a\\u2066b\"", unsafe_at(2)},
      {"BidiPopIsolate", "\"ab\\u2069\"", unsafe_at(3)},
      {"ControlAfterMultibyte", "\"γ\\u0001\"", unsafe_at(3)},
      {"TooLong", "\"" + std::string(4097, 'x') + "\"",
       "spec.toml:3:15: error: 'experiment.description' is longer than 4096 bytes"},
  };
}

class BadDescriptionTest : public ::testing::TestWithParam<DescriptionCase> {};

TEST_P(BadDescriptionTest, IsRejected) {
  const DescriptionCase& c = GetParam();
  std::optional<gc::Spec> spec;
  EXPECT_EQ(load_messages(spec_with_description(c.toml), &spec), (Strings{c.expected}));
  EXPECT_FALSE(spec.has_value());
}

INSTANTIATE_TEST_SUITE_P(Hostile, BadDescriptionTest, ::testing::ValuesIn(bad_descriptions()),
                         [](const ::testing::TestParamInfo<DescriptionCase>& info) { return info.param.label; });

// Invalid UTF-8 written raw into the file: toml++ rejects the file.
struct RawBytesCase {
  std::string label;
  std::string bytes;  // inserted between "ab" and "cd" in description = "ab...cd"
};

std::vector<RawBytesCase> raw_invalid_utf8() {
  return {
      {"LoneContinuationAndFF", "\xff\xfe"},
      {"OverlongSlash", "\xc0\xaf"},
      {"Surrogate", "\xed\xa0\x80"},
      {"TruncatedSequence", "\xe2\x82"},
      {"AboveU10FFFF", "\xf4\x90\x80\x80"},
      {"Latin1", "\xe9"},
  };
}

std::string spec_with_raw_description_bytes(const std::string& bytes) {
  return spec_with_description("\"ab" + bytes + "cd\"");
}

TEST(HostileDescriptionTest, RawInvalidUtf8IsRejectedByTheTomlParser) {
  for (const auto& c : raw_invalid_utf8()) {
    std::optional<gc::Spec> spec;
    const Strings messages = load_messages(spec_with_raw_description_bytes(c.bytes), &spec);
    EXPECT_FALSE(spec.has_value()) << c.label;
    ASSERT_EQ(messages.size(), 1u) << c.label;
    // Line 3 (the exact column is checked by the test below).
    EXPECT_EQ(messages[0].rfind("spec.toml:3:", 0), 0u) << c.label << ": " << messages[0];
    EXPECT_NE(messages[0].find(": error: TOML syntax: Encountered invalid utf-8 sequence"), std::string::npos)
        << c.label << ": " << messages[0];
  }
}

// Regression (was wrong before): toml++ reports an invalid UTF-8 sequence at the
// character before it (3:17, the 'b' of "ab"; at the end of the previous
// line when the byte starts a line), and gcompile passes the position on.
// The offending byte is at 3:18.
TEST(HostileDescriptionTest, RawInvalidUtf8IsReportedAtTheOffendingByte) {
  for (const auto& c : raw_invalid_utf8()) {
    EXPECT_EQ(load_messages(spec_with_raw_description_bytes(c.bytes)),
              (Strings{"spec.toml:3:18: error: TOML syntax: Encountered invalid utf-8 sequence"}))
        << c.label;
  }
  EXPECT_EQ(load_messages(gc::test::minimal_spec_sections() + "\xff = 1\n"),
            (Strings{"spec.toml:21:1: error: TOML syntax: Encountered invalid utf-8 sequence"}));
}

TEST(HostileDescriptionTest, RawInvalidUtf8InAnExperimentNameIsRejected) {
  const Strings messages = load_messages(spec_with_name("\"a\xff\""));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].rfind("spec.toml:2:", 0), 0u) << messages[0];
  EXPECT_NE(messages[0].find("TOML syntax: Encountered invalid utf-8 sequence"), std::string::npos) << messages[0];
}

// Valid descriptions with everything that could break a generated file.
struct ExoticCase {
  std::string label;
  std::string toml;
  std::string decoded;
};

std::vector<ExoticCase> exotic_descriptions() {
  return {
      {"QuotesAndBackslashes", R"("He said \"hi\" in C:\\path\\ and 'single'")", "He said \"hi\" in C:\\path\\ and 'single'"},
      {"CommentTerminator", R"("ends a comment */ and starts one /* and // too")",
       "ends a comment */ and starts one /* and // too"},
      {"Trigraphs", "\"?\?= ?\?/ ?\?' ?\?( ?\?) ?\?! ?\?< ?\?> ?\?- ?\??\"", "?\?= ?\?/ ?\?' ?\?( ?\?) ?\?! ?\?< ?\?> ?\?- ?\??"},
      {"Preprocessor", R"("#include <cstdlib>\n#define main exit")", "#include <cstdlib>\n#define main exit"},
      {"Newlines", R"("line 1\nline 2\n\nline 4\n")", "line 1\nline 2\n\nline 4\n"},
      {"TabsAndTrailingBackslash", R"("a\tb\\")", "a\tb\\"},
      {"BackslashNewline", R"("""continued \\
next""")",
       "continued \\\nnext"},
      {"EmojiAndGreek", "\"🎉 γ = 1 with ε = 1e-12 — ok ✓\"", "🎉 γ = 1 with ε = 1e-12 — ok ✓"},
      {"HtmlAndTemplate", R"x("<script>alert('x')</script> &amp; {{ var }} ${HOME} $(rm -rf /)")x",
       "<script>alert('x')</script> &amp; {{ var }} ${HOME} $(rm -rf /)"},
      {"TomlLookalike", R"("\"\"\"\n[model]\nd_model = 1\n'''")", "\"\"\"\n[model]\nd_model = 1\n'''"},
      {"MultilineLiteral", "'''\nraw \\n stays, \"quotes\" and */ ?\?=\n#include\n🎉'''",
       "raw \\n stays, \"quotes\" and */ ?\?=\n#include\n🎉"},
      {"OctalLookingDigits", R"("\u0041\u0030 \\0 \\101 0x41")", "A0 \\0 \\101 0x41"},
      {"ExactlyMaxLength", "\"" + std::string(4096, 'y') + "\"", std::string(4096, 'y')},
      {"Empty", "\"\"", ""},
      // A raw CRLF inside a multi-line string is a TOML newline: it reads as "\n", not as a CR.
      {"CrLfInMultilineLiteral", "'''\nline\r\nx'''", "line\nx"},
  };
}

std::ostream& operator<<(std::ostream& out, const ExoticCase& c) { return out << c.label; }

class ExoticDescriptionTest : public ::testing::TestWithParam<ExoticCase> {};

TEST_P(ExoticDescriptionTest, IsAcceptedVerbatim) {
  const ExoticCase& c = GetParam();
  std::optional<gc::Spec> spec;
  EXPECT_EQ(load_messages(spec_with_description(c.toml), &spec), Strings{});
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->experiment.description, c.decoded);
}

// The resolved spec (written into every generated tree) is valid TOML and
// gives back the same description.
TEST_P(ExoticDescriptionTest, SurvivesResolvedToml) {
  const ExoticCase& c = GetParam();
  std::optional<gc::Spec> spec;
  load_messages(spec_with_description(c.toml), &spec);
  ASSERT_TRUE(spec.has_value());
  const std::string resolved = gc::resolved_toml(*spec);
  toml::table table;
  try {
    table = toml::parse(resolved);
  } catch (const toml::parse_error& e) {
    FAIL() << "resolved TOML does not parse: " << e.description() << "\n" << resolved;
  }
  EXPECT_EQ(table["experiment"]["description"].value<std::string>(), std::optional<std::string>(c.decoded));
  EXPECT_EQ(table["experiment"]["name"].value<std::string>(), std::optional<std::string>("t"));
}

INSTANTIATE_TEST_SUITE_P(Hostile, ExoticDescriptionTest, ::testing::ValuesIn(exotic_descriptions()),
                         [](const ::testing::TestParamInfo<ExoticCase>& info) { return info.param.label; });

// ---------------------------------------------------------------------------
// Escaping functions

// Decodes a sequence of adjacent C++ narrow string literals ("a" "b"),
// separated by spaces, as a C++17 compiler would (translation phases 1-6,
// no trigraphs). Returns nullopt for anything that is not exactly that, e.g.
// a raw newline or an unterminated literal.
std::optional<std::string> decode_cpp_literals(const std::string& src) {
  std::string out;
  std::size_t i = 0;
  bool any = false;
  auto is_octal = [](char c) { return c >= '0' && c <= '7'; };
  auto hex_value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  while (i < src.size()) {
    if (src[i] == ' ') {
      ++i;
      continue;
    }
    if (src[i] != '"') return std::nullopt;
    any = true;
    ++i;
    for (;;) {
      if (i >= src.size()) return std::nullopt;  // unterminated
      const char c = src[i];
      if (c == '"') {
        ++i;
        break;
      }
      if (c == '\n' || c == '\r') return std::nullopt;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (++i >= src.size()) return std::nullopt;
      const char esc = src[i];
      switch (esc) {
        case '"': case '\\': case '\'': case '?': out += esc; ++i; continue;
        case 'a': out += '\a'; ++i; continue;
        case 'b': out += '\b'; ++i; continue;
        case 'f': out += '\f'; ++i; continue;
        case 'n': out += '\n'; ++i; continue;
        case 'r': out += '\r'; ++i; continue;
        case 't': out += '\t'; ++i; continue;
        case 'v': out += '\v'; ++i; continue;
        case 'x': {  // as many hex digits as follow
          ++i;
          unsigned value = 0;
          std::size_t digits = 0;
          while (i < src.size() && hex_value(src[i]) >= 0) {
            value = value * 16 + static_cast<unsigned>(hex_value(src[i++]));
            ++digits;
          }
          if (digits == 0 || value > 0xff) return std::nullopt;
          out += static_cast<char>(value);
          continue;
        }
        default:
          if (!is_octal(esc)) return std::nullopt;  // includes a backslash-newline continuation
          unsigned value = 0;
          for (int k = 0; k < 3 && i < src.size() && is_octal(src[i]); ++k) value = value * 8 + (src[i++] - '0');
          if (value > 0xff) return std::nullopt;
          out += static_cast<char>(value);
          continue;
      }
    }
  }
  if (!any) return std::nullopt;
  return out;
}

std::vector<std::string> nasty_strings() {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  return {
      "",
      "plain",
      "\"",
      "\\",
      "\\\"",
      "a\"b\\c",
      "*/",
      "/**/",
      "*//*",
      "**/",
      "x*/y*/z",
      "?\?=",
      "?\??",
      "?\??\?/",
      "a?\?/\nb",
      "trailing?",
      "?\"?",
      "line1\nline2",
      "back\\\nslash-newline",
      "cr\rlf\r\n",
      std::string("nul\0after", 9),
      std::string("\0" "1", 2),  // an escaped NUL followed by a digit
      std::string("\x01" "7", 2),
      "\x7f" "0",
      "\x1b[31mred",
      "#include <x>\n#define A B",
      "R\"(raw)\"",
      "🎉 γ ε — ✓",
      "\u202Eevil\u202C",
      "\xff\xfe invalid utf-8",
      all_bytes,
  };
}

TEST(CppStringLiteralTest, IsSafeAndDecodesBack) {
  for (const std::string& s : nasty_strings()) {
    const std::string lit = gc::cpp_string_literal(s);
    SCOPED_TRACE(lit);
    ASSERT_GE(lit.size(), 2u);
    EXPECT_EQ(lit.front(), '"');
    EXPECT_EQ(lit.back(), '"');
    for (unsigned char c : lit) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "unescaped byte " << static_cast<int>(c);
    }
    EXPECT_EQ(lit.find('\n'), std::string::npos);
    EXPECT_EQ(lit.find("*/"), std::string::npos);
    EXPECT_EQ(lit.find("?\?"), std::string::npos);
    // Every quote is escaped or delimits one of several adjacent literals,
    // which the decoder verifies by consuming the whole text.
    const auto decoded = decode_cpp_literals(lit);
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(*decoded, s);
  }
}

TEST(CppStringLiteralTest, ExactForms) {
  EXPECT_EQ(gc::cpp_string_literal("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(gc::cpp_string_literal("x\ny"), R"("x\012y")");
  EXPECT_EQ(gc::cpp_string_literal(std::string("\0" "1", 2)), R"("\0001")");
  EXPECT_EQ(gc::cpp_string_literal("?\?="), R"("?\?=")");
  EXPECT_EQ(gc::cpp_string_literal("a*/b"), R"("a*" "/b")");
  EXPECT_EQ(gc::cpp_string_literal("γ"), R"("\316\263")");
}

TEST(CppStringLiteralTest, DecoderRejectsUnsafeLiterals) {
  // Sanity checks of the test's own decoder.
  EXPECT_EQ(decode_cpp_literals(R"("a" "b")"), std::optional<std::string>("ab"));
  EXPECT_EQ(decode_cpp_literals(R"("\x41" "\101\0001")"), std::optional<std::string>(std::string("AA\0" "1", 4)));
  EXPECT_FALSE(decode_cpp_literals("\"a\nb\"").has_value());
  EXPECT_FALSE(decode_cpp_literals("\"a\\\nb\"").has_value());
  EXPECT_FALSE(decode_cpp_literals("\"a\"b\"").has_value());
  EXPECT_FALSE(decode_cpp_literals("\"abc").has_value());
  EXPECT_FALSE(decode_cpp_literals("").has_value());
}

// Strings a TOML document can hold: valid UTF-8 (toml++ guarantees it for
// every string it parses, so no spec string can be anything else).
std::vector<std::string> toml_strings() {
  std::string controls;
  for (int b = 0; b < 0x20; ++b) controls += static_cast<char>(b);
  controls += '\x7f';
  return {
      "",
      "plain",
      "\"",
      "\\",
      "\"\"\"",
      "'''",
      "a\"b\\c'd",
      "line1\nline2\r\n",
      "tab\there",
      controls,
      std::string("nul\0after", 9),
      "\\u0041 is not an escape here",
      "[model]\nd_model = 1",
      "# comment",
      "🎉 γ ε — ✓",
      "\u0085 C1 and \u202E bidi and \u2028 separator",
      "*/ ?\?= #include",
  };
}

TEST(TomlStringLiteralTest, RoundTripsThroughTomlParse) {
  for (const std::string& s : toml_strings()) {
    const std::string lit = gc::toml_string_literal(s);
    SCOPED_TRACE(lit);
    for (unsigned char c : lit) {
      EXPECT_FALSE(c < 0x20 || c == 0x7f) << "raw control byte " << static_cast<int>(c);
    }
    toml::table table;
    try {
      table = toml::parse("v = " + lit + "\n");
    } catch (const toml::parse_error& e) {
      FAIL() << e.description();
    }
    EXPECT_EQ(table["v"].value<std::string>(), std::optional<std::string>(s));
    EXPECT_EQ(table.size(), 1u);  // nothing after the string became a key
  }
}

TEST(TomlStringLiteralTest, ExactForms) {
  EXPECT_EQ(gc::toml_string_literal("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(gc::toml_string_literal("x\ny\tz\r"), R"("x\ny\tz\r")");
  EXPECT_EQ(gc::toml_string_literal(std::string("\0\x1b\x7f", 3)), R"("\u0000\u001B\u007F")");
  EXPECT_EQ(gc::toml_string_literal("γ"), "\"γ\"");
}

TEST(HtmlEscapeTest, EscapesMarkupCharacters) {
  EXPECT_EQ(gc::html_escape("<script>alert('x & \"y\"')</script>"),
            "&lt;script&gt;alert(&#39;x &amp; &quot;y&quot;&#39;)&lt;/script&gt;");
  EXPECT_EQ(gc::html_escape("&amp;"), "&amp;amp;");  // escaped again, never interpreted
  EXPECT_EQ(gc::html_escape("plain γ 🎉\n"), "plain γ 🎉\n");
  EXPECT_EQ(gc::html_escape(""), "");
}

TEST(HtmlEscapeTest, OutputHasNoMarkupCharacters) {
  for (const std::string& s : nasty_strings()) {
    const std::string out = gc::html_escape(s);
    EXPECT_EQ(out.find_first_of("<>\"'"), std::string::npos) << out;
    // Every '&' starts one of the five entities.
    for (std::size_t at = out.find('&'); at != std::string::npos; at = out.find('&', at + 1)) {
      const std::string rest = out.substr(at);
      const bool entity = rest.rfind("&amp;", 0) == 0 || rest.rfind("&lt;", 0) == 0 || rest.rfind("&gt;", 0) == 0 ||
                          rest.rfind("&quot;", 0) == 0 || rest.rfind("&#39;", 0) == 0;
      EXPECT_TRUE(entity) << out;
    }
  }
}

}  // namespace
