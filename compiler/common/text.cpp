#include "common/text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gc {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance (Damerau-Levenshtein without repeats).
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const std::size_t dist = edit_distance(word, c);
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         std::string_view quote) {
  const std::string best = closest_match(word, candidates);
  if (best.empty()) return "";
  return "; did you mean " + std::string(quote) + best + std::string(quote) + "?";
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

std::string join_choices(const std::vector<std::string>& items) {
  if (items.empty()) return "";
  if (items.size() == 1) return items[0];
  std::vector<std::string> head(items.begin(), items.end() - 1);
  return join(head, ", ") + " or " + items.back();
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // integers in full: 10000, not 1e+04
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // "1e-05" -> "1e-5", "1e+20" -> "1e20" (still valid TOML and C++).
  std::string out = buf;
  const auto e = out.find('e');
  if (e != std::string::npos) {
    std::string mantissa = out.substr(0, e), exponent = out.substr(e + 1);
    const bool negative = exponent[0] == '-';
    exponent = exponent.substr(exponent[0] == '-' || exponent[0] == '+' ? 1 : 0);
    while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
    out = mantissa + "e" + (negative ? "-" : "") + exponent;
  }
  return out;
}

std::string format_count(double v) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  double x = v;
  while (std::fabs(x) >= 1000.0 && u < 4) {
    x /= 1000.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%.0f", x);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f%s", x, units[u]);
  }
  return buf;
}

std::string format_bytes(double v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double x = v;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", x, units[u]);
  return buf;
}

std::string cpp_string_literal(std::string_view s) {
  std::string out = "\"";
  char prev = 0;
  for (unsigned char c : s) {
    char buf[8];
    const bool printable = c >= 0x20 && c < 0x7f;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (!printable) {
      // Octal escapes are at most three digits, so a following digit cannot
      // be swallowed into the escape (unlike \x).
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    } else if (c == '?' && prev == '?') {
      out += "\\?";  // never form a trigraph
    } else if (c == '/' && prev == '*') {
      out += "\" \"/";  // never close a comment the literal sits in
    } else {
      out += static_cast<char>(c);
    }
    prev = static_cast<char>(c);
  }
  out += '"';
  return out;
}

std::string toml_string_literal(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string check_safe_name(std::string_view name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > 64) return "must be at most 64 characters (got " + std::to_string(name.size()) + ")";
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) {
      std::string shown;
      if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f) {
        shown = std::string("'") + c + "'";
      } else {
        char buf[16];
        std::snprintf(buf, sizeof buf, "byte 0x%02X", static_cast<unsigned char>(c));
        shown = buf;
      }
      return "may contain only a-z, 0-9, '_', '.' and '-' (found " + shown + " at position " +
             std::to_string(i + 1) + ")";
    }
  }
  if (name[0] == '.' || name[0] == '-') return "must not start with '.' or '-'";
  return "";
}

bool decode_utf8(std::string_view s, std::size_t i, std::size_t& length, unsigned& code_point) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    length = 1;
    code_point = c;
    return true;
  }
  std::size_t len = 0;
  unsigned cp = 0;
  if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
  else return false;
  if (i + len > s.size()) return false;
  for (std::size_t k = 1; k < len; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (cc & 0x3F);
  }
  const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;  // overlong, surrogate
  length = len;
  code_point = cp;
  return true;
}

std::size_t find_invalid_utf8(std::string_view s) {
  std::size_t i = 0, len = 0;
  unsigned cp = 0;
  while (i < s.size()) {
    if (!decode_utf8(s, i, len, cp)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::size_t find_unsafe_text(std::string_view s, bool allow_newline) {
  std::size_t i = 0, len = 0;
  unsigned cp = 0;
  while (i < s.size()) {
    if (!decode_utf8(s, i, len, cp)) return i;
    const bool c0 = (cp < 0x20 || cp == 0x7f) && cp != '\t' && !(allow_newline && cp == '\n');
    // C1 controls and the bidi overrides/isolates that can disguise text.
    const bool c1_or_bidi = (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
    if (c0 || c1_or_bidi) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string utf8_char_at(std::string_view s, std::size_t i) {
  std::size_t len = 1;
  unsigned cp = 0;
  if (i >= s.size()) return "";
  if (!decode_utf8(s, i, len, cp)) len = 1;
  return std::string(s.substr(i, len));
}

}  // namespace gc
