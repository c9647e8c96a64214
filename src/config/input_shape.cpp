#include "config/input_shape.h"

#include <vector>

#include <fmt/format.h>

namespace meridian::input_shape {
namespace {

// Line and column of byte `at`, counted once, only when there is an issue to report.
ShapeIssue issue_at(std::string_view text, std::size_t at, std::string what) {
  ShapeIssue issue;
  issue.byte = at;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++issue.line;
      line_start = i + 1;
    }
  }
  issue.column = at - line_start + 1;
  issue.what = std::move(what);
  return issue;
}

std::string nesting_text() {
  return fmt::format("arrays and tables are nested more than {} deep", kMaxNesting);
}

bool starts_with_at(std::string_view text, std::size_t at, std::string_view what) {
  return text.substr(at, what.size()) == what;
}

}  // namespace

std::optional<ShapeIssue> toml_too_deep(std::string_view text) {
  // What encloses the current position: '[' an array, '{' an inline table, 'h' a table header.
  std::vector<char> open;
  bool in_key = true;  // a key is being read (line start, a header, after '{' or ',' in an inline table)
  std::size_t key_parts = 1;
  const auto start_key = [&] {
    in_key = true;
    key_parts = 1;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (c) {
      case '#':  // a comment, to the end of the line
        while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        break;
      case '"':
      case '\'': {
        const bool basic = c == '"';
        const bool multi = starts_with_at(text, i, basic ? "\"\"\"" : "'''");
        const std::string_view close = multi ? (basic ? "\"\"\"" : "'''") : (basic ? "\"" : "'");
        i += multi ? 3 : 1;
        for (; i < text.size(); ++i) {
          if (basic && text[i] == '\\') {
            ++i;  // the escaped character, whatever it is
          } else if (starts_with_at(text, i, close)) {
            // A multi-line string may end in up to two more quotes ("""a"""""): take them all.
            if (multi) {
              while (i + 3 < text.size() && text[i + 3] == close[0]) ++i;
            }
            i += close.size() - 1;
            break;
          } else if (!multi && text[i] == '\n') {
            --i;  // an unterminated single-line string: the parser reports it; the line still ends
            break;
          }
        }
        break;
      }
      case '\n':
        if (open.empty()) start_key();
        break;
      case '.':
        if (in_key && ++key_parts > kMaxKeyParts) {
          return issue_at(text, i,
                          fmt::format("a dotted key or table header has more than {} parts", kMaxKeyParts));
        }
        break;
      case '=': in_key = false; break;
      case ',':
        if (!open.empty() && open.back() == '{') start_key();
        break;
      case '[':
        if (open.empty() && in_key) {  // a table header: [a.b] or [[a.b]]
          if (i + 1 < text.size() && text[i + 1] == '[') ++i;
          open.push_back('h');
          key_parts = 1;
        } else {
          open.push_back('[');
          if (open.size() > kMaxNesting) return issue_at(text, i, nesting_text());
        }
        break;
      case '{':
        open.push_back('{');
        if (open.size() > kMaxNesting) return issue_at(text, i, nesting_text());
        start_key();
        break;
      case ']':
      case '}':
        if (!open.empty()) {
          if (open.back() == 'h' && i + 1 < text.size() && text[i + 1] == ']') ++i;
          const bool header = open.back() == 'h';
          open.pop_back();
          // After a header or a value closes, no key follows on this line; after an inline
          // table's value, the enclosing inline table continues at ',' (handled there).
          in_key = false;
          if (header) key_parts = 1;
        }
        break;
      default: break;
    }
  }
  return std::nullopt;
}

std::optional<ShapeIssue> json_too_deep(std::string_view text) {
  std::size_t depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) {
        return issue_at(text, i, fmt::format("arrays and objects are nested more than {} deep", kMaxNesting));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace meridian::input_shape
