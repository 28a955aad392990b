// Small text utilities shared by the compiler stages: spelling suggestions,
// number formatting, and escaping of user strings for every output language
// gcompile writes (C++, TOML, JSON, HTML, Markdown), so that no string from a
// spec can ever inject code into a generated file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gc {

// Edit distance (insert, delete, substitute, adjacent transpose).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The closest candidate within a distance that scales with the word's length,
// or "" when nothing is close enough to be a plausible typo.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" or "" (ready to append to a message).
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         std::string_view quote = "'");

// "a, b or c"
std::string join_choices(const std::vector<std::string>& items);
std::string join(const std::vector<std::string>& items, std::string_view sep);

// Shortest decimal that round-trips a double exactly ("1e-05", "0.02", "3").
std::string format_double(double v);
// Human counts: 1234567 -> "1.23M".
std::string format_count(double v);
// Human bytes: 1536 -> "1.50 KiB".
std::string format_bytes(double v);

// A quoted C++ string literal whose bytes decode back to `s` exactly; only
// printable ASCII appears unescaped, and sequences that could end a comment,
// form a trigraph or continue a line are broken up.
std::string cpp_string_literal(std::string_view s);
// A basic TOML string "..." with every control character escaped.
std::string toml_string_literal(std::string_view s);
// HTML text: & < > " ' escaped.
std::string html_escape(std::string_view s);

// Safe for a directory name: [a-z0-9_.-]+, 1..64 chars, not starting with
// '.' or '-'. Returns "" if valid, else what is wrong.
std::string check_safe_name(std::string_view name);

// Control characters (other than tab and newline) or invalid UTF-8: returns
// the byte offset of the first offending byte, or npos.
std::size_t find_unsafe_text(std::string_view s, bool allow_newline);

// Decodes the UTF-8 sequence at byte i (rejecting overlongs and surrogates).
bool decode_utf8(std::string_view s, std::size_t i, std::size_t& length, unsigned& code_point);
// Byte offset of the first invalid UTF-8 sequence, or npos.
std::size_t find_invalid_utf8(std::string_view s);
// The whole UTF-8 character starting at byte i (one byte if invalid).
std::string utf8_char_at(std::string_view s, std::size_t i);

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace gc
